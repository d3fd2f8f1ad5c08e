package shape

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxMethods bounds the method set of every type of the module, promoted
// methods of the module included: a type past it gathers too many
// concerns. The Go client too: its file and checkpoint calls are types of
// their own (Client.Files, Client.History).
const maxMethods = 60

// maxGatewayMethods bounds the daemon's composing type: construction,
// start and close order, wiring. Free functions whose first parameter is
// a *Gateway count as its methods.
const maxGatewayMethods = 40

// pkgInfo is what go list says of one package.
type pkgInfo struct {
	path, dir string
	files     []string
	export    string
	standard  bool
}

// listPackages runs go list over the module, with the export data of
// every package it depends on (built if the cache lacks it).
func listPackages(t *testing.T) map[string]*pkgInfo {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-export", "-deps",
		"-f", "{{.ImportPath}}\t{{.Dir}}\t{{.Export}}\t{{.Standard}}\t{{join .GoFiles \" \"}}", "warren/...")
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := make(map[string]*pkgInfo)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 5)
		if len(f) != 5 {
			t.Fatalf("go list: a line of %d fields: %q", len(f), sc.Text())
		}
		p := &pkgInfo{path: f[0], dir: f[1], export: f[2], standard: f[3] == "true"}
		if f[4] != "" {
			p.files = strings.Fields(f[4])
		}
		pkgs[p.path] = p
	}
	return pkgs
}

func inModule(path string) bool {
	return path == module || strings.HasPrefix(path, module+"/")
}

// typeCount is one type's method set size.
type typeCount struct {
	name    string
	methods int
}

// TestMethodSets: no type of the module outside client/ has more than
// maxMethods methods in its method set (the pointer's, so value and
// pointer receivers both count), promoted methods declared in this module
// included, and Gateway at most maxGatewayMethods. Unexported types and
// methods count as much as exported ones, so the module's packages are
// type-checked from source; their imports come from export data.
func TestMethodSets(t *testing.T) {
	pkgs := listPackages(t)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		p, ok := pkgs[path]
		if !ok || p.export == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(p.export)
	})
	var all []typeCount
	checked := 0
	for _, p := range pkgs {
		if !inModule(p.path) || len(p.files) == 0 {
			continue
		}
		var files []*ast.File
		for _, name := range p.files {
			f, err := parser.ParseFile(fset, filepath.Join(p.dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		conf := types.Config{Importer: imp, Error: func(error) {}}
		pkg, err := conf.Check(p.path, fset, files, nil)
		if err != nil {
			t.Fatalf("type-check %s: %v", p.path, err)
		}
		checked++
		counts := countMethods(pkg)
		if p.path == module+"/gateway" {
			if n, ok := counts["Gateway"]; ok {
				counts["Gateway"] = n + freeFuncsOver(pkg, "Gateway")
			}
		}
		for name, n := range counts {
			all = append(all, typeCount{p.path + "." + name, n})
			limit := maxMethods
			if p.path == module+"/gateway" && name == "Gateway" {
				limit = maxGatewayMethods
			}
			if n > limit {
				t.Errorf("%s.%s has %d methods (promoted ones of this module and free functions over it included); at most %d: split a concern off into a room of its own",
					p.path, name, n, limit)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("type-checked %d of the module's packages; go list found too few", checked)
	}
	slices.SortFunc(all, func(a, b typeCount) int { return b.methods - a.methods })
	for _, c := range all[:min(5, len(all))] {
		t.Logf("%4d  %s", c.methods, c.name)
	}
}

// countMethods returns, for every named type declared in pkg, how many
// methods declared in this module its pointer's method set holds.
func countMethods(pkg *types.Package) map[string]int {
	counts := make(map[string]int)
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok || tn.IsAlias() {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok {
			continue
		}
		var ms *types.MethodSet
		if types.IsInterface(named) {
			ms = types.NewMethodSet(named)
		} else {
			ms = types.NewMethodSet(types.NewPointer(named))
		}
		n := 0
		for m := range ms.Methods() {
			if fp := m.Obj().Pkg(); fp != nil && inModule(fp.Path()) {
				n++
			}
		}
		counts[name] = n
	}
	return counts
}

// freeFuncsOver counts the package-level functions of pkg whose first
// parameter is the named type or a pointer to it.
func freeFuncsOver(pkg *types.Package, typeName string) int {
	n := 0
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		fn, ok := scope.Lookup(name).(*types.Func)
		if !ok {
			continue
		}
		params := fn.Signature().Params()
		if params.Len() == 0 {
			continue
		}
		t := params.At(0).Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if named, ok := t.(*types.Named); ok && named.Obj().Pkg() == pkg && named.Obj().Name() == typeName {
			n++
		}
	}
	return n
}
