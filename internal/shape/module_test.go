package shape

import (
	"os"
	"path/filepath"
	"testing"
)

// module is the module's path: its packages are warren/...
const module = "warren"

// moduleRoot is the folder of go.mod, two levels above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(wd))
}
