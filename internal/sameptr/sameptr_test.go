package sameptr

import "testing"

type counter struct{ n int }

func (c *counter) inc() { c.n++ }

// uncomparable is a comparable-looking struct that == panics on.
type uncomparable struct{ s []int }

// TestFunc: a func value is the same as itself and as its copies, nil as
// nil; closures of different variables, and nil against a func, are not.
func TestFunc(t *testing.T) {
	var a, b int
	f := func() { a++ }
	g := func() { b++ }
	copyOfF := f
	var nilFunc func()
	for _, tc := range []struct {
		name string
		x, y func()
		want bool
	}{
		{"itself", f, f, true},
		{"a copy", f, copyOfF, true},
		{"nil and nil", nilFunc, nil, true},
		{"another closure", f, g, false},
		{"a func and nil", f, nil, false},
	} {
		if got := Func(tc.x, tc.y); got != tc.want {
			t.Errorf("%s: Func = %v, want %v", tc.name, got, tc.want)
		}
	}
	c1, c2 := &counter{}, &counter{}
	m := c1.inc
	if !Func(m, m) || Func(m, c2.inc) {
		t.Error("a method value is itself, and not the method value of another receiver")
	}
}

// TestValue: equal comparable values are the same, the same interface of
// an uncomparable type (a func, a struct with a slice) is the same as
// itself, and values of other types, other boxes and nil against a value
// are not; == never panics.
func TestValue(t *testing.T) {
	f := func() {}
	var g func() = func() {}
	u := any(uncomparable{s: []int{1}})
	for _, tc := range []struct {
		name string
		x, y any
		want bool
	}{
		{"nil and nil", nil, nil, true},
		{"nil and a value", nil, 1, false},
		{"equal comparable", 1, 1, true},
		{"unequal comparable", 1, 2, false},
		{"other types", 1, int64(1), false},
		{"two pointers", &counter{}, &counter{}, false},
		{"a func, itself", any(f), any(f), true},
		{"another func", any(f), any(g), false},
		{"an uncomparable box, itself", u, u, true},
		{"another box of an equal uncomparable", u, any(uncomparable{s: []int{1}}), false},
	} {
		if got := Value(tc.x, tc.y); got != tc.want {
			t.Errorf("%s: Value = %v, want %v", tc.name, got, tc.want)
		}
	}
	p := &counter{}
	if !Value(p, p) {
		t.Error("a pointer is itself")
	}
}
