package fs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestZZProf(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		return
	}
	_, mnt := mountTemp(t, Options{NoPassthrough: os.Getenv("ZZNOPT") != ""})
	os.WriteFile(filepath.Join(mnt, "f"), []byte("hi"), 0644)
	out, err := exec.Command("python3", "/var/tmp/lat/t.py", filepath.Join(mnt, "f")).CombinedOutput()
	t.Logf("%s %v", out, err)
}
