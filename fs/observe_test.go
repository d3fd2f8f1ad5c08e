package fs

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestObservedOpsNamed: ObservedOps names exactly the operations
// observedOps tells its observer of, so that an observer that makes its
// series from the list has one for each (a gateway without one for an op
// still counts it, more slowly).
func TestObservedOpsNamed(t *testing.T) {
	src, err := os.ReadFile("observe.go")
	if err != nil {
		t.Fatal(err)
	}
	var told []string
	for _, m := range regexp.MustCompile(`o\.done\("([a-z]+)"`).FindAllSubmatch(src, -1) {
		told = append(told, string(m[1]))
	}
	named := ObservedOps()
	slices.Sort(told)
	slices.Sort(named)
	if len(told) == 0 || !slices.Equal(told, named) {
		t.Errorf("observedOps tells %v; ObservedOps names %v", told, named)
	}
}
