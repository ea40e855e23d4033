package registry_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/registry"
)

func TestSetGroupsKeepsTheEntryAndItsScale(t *testing.T) {
	r := registry.New()
	b, err := bulkhead.New(bulkhead.Config{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("k", b, "edge"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Scale("edge", 0.5); err != nil || b.Max() != 5 {
		t.Fatalf("Scale: %v, max %d", err, b.Max())
	}
	if err := r.SetGroups("k", "storage", "edge", "storage"); err != nil {
		t.Fatal(err)
	}
	if g := r.Groups("k"); !slices.Equal(g, []string{"edge", "storage"}) {
		t.Fatalf("groups %v", g)
	}
	if got, _ := r.Get("k"); got != b {
		t.Fatalf("instance %v after SetGroups", got)
	}
	if n := r.Names("storage"); !slices.Equal(n, []string{"k"}) {
		t.Fatalf("storage names %v", n)
	}
	if n, err := r.Restore("storage"); err != nil || n != 1 || b.Max() != 10 {
		t.Fatalf("Restore through the new group: %d, %v, max %d; want 1, nil, 10", n, err, b.Max())
	}
	if err := r.SetGroups("k"); err != nil || r.Groups("k") != nil {
		t.Fatalf("SetGroups to none: %v, %v", err, r.Groups("k"))
	}
}

func TestSetGroupsRefusesAnAbsentName(t *testing.T) {
	r := registry.New()
	if err := r.SetGroups("nope", "g"); !errors.Is(err, registry.ErrNotRegistered) {
		t.Errorf("SetGroups of an absent name: %v", err)
	}
	if err := r.SetGroups("", "g"); !errors.Is(err, registry.ErrEmptyName) {
		t.Errorf("SetGroups of an empty name: %v", err)
	}
	if r.Len() != 0 {
		t.Errorf("Len %d", r.Len())
	}
}

func TestRebaseMakesRestorePutBackTheValueSetSinceTheScale(t *testing.T) {
	r := registry.New()
	b, err := bulkhead.New(bulkhead.Config{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Add("k", b, "edge")
	if r.Rebase("k") {
		t.Error("Rebase of an instance not scaled reported true")
	}
	if _, err := r.Scale("edge", 0.5); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMax(20); err != nil { // the owner's new value
		t.Fatal(err)
	}
	if !r.Rebase("k") {
		t.Fatal("Rebase of a scaled instance reported false")
	}
	if _, err := r.Scale("edge", 0.5); err != nil || b.Max() != 10 {
		t.Fatalf("Scale after Rebase: %v, max %d; want 10 (half the new baseline)", err, b.Max())
	}
	if n, _ := r.Restore("edge"); n != 1 || b.Max() != 20 {
		t.Errorf("Restore: %d, max %d; want 1, 20", n, b.Max())
	}
	if r.Rebase("absent") {
		t.Error("Rebase of an absent name reported true")
	}
}

func TestUpdateScaledTakesTheNewBaselineAndItsUndoPutsBackTheScaledValue(t *testing.T) {
	r := registry.New()
	b, err := bulkhead.New(bulkhead.Config{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Add("k", b, "edge")
	if _, err := r.Scale("edge", 0.5); err != nil || b.Max() != 5 {
		t.Fatalf("Scale: %v, max %d", err, b.Max())
	}
	undo, err := r.UpdateScaled("k", func() error { return b.SetMax(20) })
	if err != nil || b.Max() != 20 {
		t.Fatalf("UpdateScaled: %v, max %d", err, b.Max())
	}
	undo(func() { _ = b.SetMax(10) })
	if b.Max() != 5 {
		t.Errorf("max %d after the undo, want the scaled 5 it had", b.Max())
	}
	if n, _ := r.Restore("edge"); n != 1 || b.Max() != 10 {
		t.Errorf("Restore after the undo: %d, max %d; want 1, 10", n, b.Max())
	}
	if _, err := r.Scale("edge", 0.5); err != nil {
		t.Fatal(err)
	}
	if _, err := r.UpdateScaled("k", func() error { return b.SetMax(30) }); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Restore("edge"); n != 1 || b.Max() != 30 {
		t.Errorf("Restore after an UpdateScaled: %d, max %d; want 1, the value set 30", n, b.Max())
	}
	refused := errors.New("refused")
	if _, err := r.UpdateScaled("k", func() error { return refused }); err != refused {
		t.Errorf("UpdateScaled of a failing set: %v, want its error unchanged", err)
	}
	if _, err := r.UpdateScaled("nope", func() error { return nil }); !errors.Is(err, registry.ErrNotRegistered) {
		t.Errorf("UpdateScaled of an absent name: %v", err)
	}
	_ = r.Add("s", "not scalable")
	ran := false
	if _, err := r.UpdateScaled("s", func() error { ran = true; return nil }); err == nil || ran {
		t.Errorf("UpdateScaled of a kind Scale leaves alone: %v, set ran %v", err, ran)
	}
}
