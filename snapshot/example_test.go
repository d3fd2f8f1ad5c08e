package snapshot_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"warren/snapshot"
)

// A checkpoint, a change, a second checkpoint built from the first, and
// what changed between them.
func Example() {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	work := filepath.Join(tmp, "workspace")
	os.MkdirAll(filepath.Join(work, "src"), 0o755)
	os.WriteFile(filepath.Join(work, "src/main.go"), []byte("package main\n"), 0o644)

	repo, err := snapshot.Open(filepath.Join(tmp, "repo"))
	if err != nil {
		log.Fatal(err)
	}
	defer repo.Close()
	root, err := unix.Open(work, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer unix.Close(root)

	// Hold the lock from the first object written until the tree is
	// recorded, so that no collection removes it meanwhile.
	unlock, err := repo.Shared(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer unlock()
	first, _, err := repo.Build(ctx, root, snapshot.Hash{}, nil, true)
	if err != nil {
		log.Fatal(err)
	}

	os.WriteFile(filepath.Join(work, "src/main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	os.WriteFile(filepath.Join(work, "README"), []byte("hello\n"), 0o644)
	second, stats, err := repo.Build(ctx, root, first, []snapshot.Change{{Path: "src/main.go"}, {Path: "README"}}, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("files %d, read %d\n", stats.Files, stats.Read)

	deltas, err := repo.Diff(ctx, first, second)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range deltas {
		fmt.Println(d.Op, d.Path)
	}
	text, _, err := repo.TextDiff(ctx, deltas[len(deltas)-1], 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(text)
	// Output:
	// files 2, read 2
	// added README
	// modified src/main.go
	// --- a/src/main.go
	// +++ b/src/main.go
	// @@ -1 +1,3 @@
	//  package main
	// +
	// +func main() {}
}
