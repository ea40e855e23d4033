package rampart_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rampart-go/rampart/internal/ticker"
	"github.com/rampart-go/rampart/internal/watchdog"

	"github.com/rampart-go/rampart"
)

const modulePath = "github.com/rampart-go/rampart"

// imports returns, for every Go file under dir (test files too when tests
// is set), the import paths it names, keyed by file.
func imports(t *testing.T, dir string, tests bool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || (!tests && strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			out[path] = append(out[path], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLayering: the ground packages under internal/ never import the root
// package (they are what it is built on), and the modules of their own
// (the Redis limiter, the benchmarks), tests included, import only the
// core's public API, so that they build against any core version with the
// same API.
func TestLayering(t *testing.T) {
	for file, paths := range imports(t, "internal", false) {
		for _, p := range paths {
			if p == modulePath {
				t.Errorf("%s imports the root package", file)
			}
		}
	}
	for _, dir := range nestedModules(t) {
		for file, paths := range imports(t, dir, true) {
			for _, p := range paths {
				if strings.HasPrefix(p, modulePath+"/internal/") {
					t.Errorf("%s (a module of its own) imports the core's %s", file, p)
				}
			}
		}
	}
}

// nestedModules returns the directory of every module of its own under the
// root (a go.mod below it: the Redis limiter, the adapters, the benchmarks).
func nestedModules(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && path != "go.mod" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no module of its own found under the root")
	}
	return dirs
}

// TestPoliciesImportNoPolicy: a policy package never imports another (the
// pipeline composes them): what they share, the Ticker, Result, NotRead and
// Budget, lives in the root package.
func TestPoliciesImportNoPolicy(t *testing.T) {
	policies := []string{"adaptive", "bulkhead", "circuitbreaker", "hedge", "ratelimit", "retry", "shed", "timeout"}
	for _, dir := range policies {
		for file, paths := range imports(t, dir, false) {
			if strings.Contains(file, "redislimit") {
				continue // a module of its own, an adapter over circuitbreaker and ratelimit
			}
			for _, p := range paths {
				for _, other := range policies {
					if other != dir && p == modulePath+"/"+other {
						t.Errorf("%s imports %s", file, p)
					}
				}
			}
		}
	}
}

// TestDefaultClockIsShared: the process-wide watchdog and DefaultTicker read
// one clock instance, so that deadlines armed on the default watchdog are
// readings of DefaultTicker.
func TestDefaultClockIsShared(t *testing.T) {
	if watchdog.Default().Clock() != rampart.DefaultTicker() || rampart.DefaultTicker() != rampart.Ticker(ticker.Default()) {
		t.Fatal("DefaultTicker and the default watchdog's clock are different instances")
	}
}

// TestModuleVetsOnOtherArchitectures: the module and its tests build where
// words are 32 bits (386, arm, mips), where x/sys/cpu's cache line is 32 B
// (arm, mips: a pad written as LineSize − n goes negative; the pads use
// pad.Tail64 and friends, which round up to whole lines) and where it has
// no line at all (wasm). go vet type-checks every package with its tests.
func TestModuleVetsOnOtherArchitectures(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the module")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	for _, target := range [][2]string{{"linux", "386"}, {"linux", "arm"}, {"linux", "mips"}, {"js", "wasm"}} {
		cmd := exec.Command(gobin, "vet", "./...")
		cmd.Env = append(os.Environ(), "GOOS="+target[0], "GOARCH="+target[1], "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=%s GOARCH=%s go vet ./...: %v\n%s", target[0], target[1], err, out)
		}
	}
}
