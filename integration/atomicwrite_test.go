package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"warren/api"
	"warren/client"
	"warren/internal/testenv"
)

// fileContent is the content of the seq-th write of file n: a header and
// a body of a size that varies from write to write, so that a cut file
// or a mix of two writes never passes for a whole one.
func fileContent(n, seq int) []byte {
	size := 256<<10 + (seq*7919+n*104729)%(2<<20)
	var b bytes.Buffer
	fmt.Fprintf(&b, "file %d write %d size %d\n", n, seq, size)
	line := fmt.Sprintf("%d-%d ", n, seq)
	for b.Len() < size {
		b.WriteString(line)
	}
	return b.Bytes()[:size]
}

// TestFileWritesSurviveKill9 kills a real daemon with SIGKILL while
// clients replace files through the file API, for 20 rounds. After each
// restart, every file must hold the whole content of its last
// acknowledged write, or the whole content of the write that was in
// flight when the daemon died: never an empty, cut or mixed file. What a
// kill leaves of a write's temporary file goes at the next write.
func TestFileWritesSurviveKill9(t *testing.T) {
	const (
		rounds  = 20
		writers = 4
	)
	d := newDaemon(t)
	ctx := context.Background()
	c := client.New(d.socket)
	if _, err := c.Bind(ctx, "default", "k9"); err != nil {
		t.Fatal(err)
	}
	c.CloseIdleConnections()
	rng := rand.New(rand.NewPCG(12, 4))
	var (
		acked    = make([]int, writers) // last acknowledged write of each file, -1 for none
		inflight = make([]int, writers) // the write under way when the daemon died
		seqs     = make([]int, writers)
		total    atomic.Int64
		checked  int
		found    int
		landed   int // of found: the write in flight, whole
		lost     int
		leftover int // temporary files found after a restart
		ws       = filepath.Join(d.data, "workspaces", "default", "k9")
	)
	for i := range acked {
		acked[i], inflight[i] = -1, -1
	}
	for round := range rounds {
		c := client.New(d.socket)
		// The daemon dies after a number of acknowledged writes drawn at
		// random, once every writer has had one, so that the kill lands
		// anywhere in a write.
		target := int64(writers + rng.IntN(3*writers))
		var (
			got      atomic.Int64
			ready    = make(chan struct{})
			readyOne sync.Once
			wg       sync.WaitGroup
			mu       sync.Mutex
			haveOne  = make([]bool, writers)
			withOne  int
		)
		for n := range writers {
			wg.Go(func() {
				for {
					mu.Lock()
					seqs[n]++
					seq := seqs[n]
					inflight[n] = seq
					mu.Unlock()
					_, err := c.Files().Write(ctx, "default", "k9", api.WriteFileRequest{
						Path: fmt.Sprintf("f%d.txt", n), Run: fmt.Sprintf("writer-%d", n), Content: string(fileContent(n, seq)),
					})
					if err != nil {
						return // the daemon is gone
					}
					mu.Lock()
					acked[n] = seq
					total.Add(1)
					if !haveOne[n] {
						haveOne[n] = true
						withOne++
					}
					enough := withOne == writers && got.Add(1) >= target
					mu.Unlock()
					if enough {
						readyOne.Do(func() { close(ready) })
					}
				}
			})
		}
		<-ready
		d.kill9()
		wg.Wait()
		c.CloseIdleConnections()
		d.start()
		left, _ := filepath.Glob(filepath.Join(ws, ".warren-write-*"))
		leftover += len(left)

		c = client.New(d.socket)
		for n := range writers {
			checked++
			r, err := c.Files().Read(ctx, "default", "k9", api.ReadFileRequest{Path: fmt.Sprintf("f%d.txt", n), Run: "checker"})
			if err != nil {
				lost++
				t.Errorf("round %d: read f%d.txt: %v", round, n, err)
				continue
			}
			switch r.Content {
			case string(fileContent(n, acked[n])):
				found++
			case string(fileContent(n, inflight[n])):
				// The write in flight landed whole: it replaces the
				// acknowledged one.
				found++
				landed++
				acked[n] = inflight[n]
			default:
				lost++
				head, _, _ := strings.Cut(r.Content, "\n")
				t.Errorf("round %d: f%d.txt holds %d bytes starting %q; want write %d (%d bytes) or write %d whole",
					round, n, len(r.Content), head, acked[n], len(fileContent(n, acked[n])), inflight[n])
			}
		}
		c.CloseIdleConnections()
	}
	// A kill between the link and the rename of a write leaves its
	// hidden temporary file; the first write in the folder after the
	// start removes it.
	c = client.New(d.socket)
	defer c.CloseIdleConnections()
	if _, err := c.Files().Write(ctx, "default", "k9", api.WriteFileRequest{Path: "last.txt", Run: "checker", Content: "last"}); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(ws, ".warren-write-*")); len(left) != 0 {
		t.Errorf("temporary files left after a write in their folder: %v", left)
	}
	t.Logf("kill -9 rounds: %d; writes acknowledged: %d; files checked after a restart: %d (each the last acknowledged write); found whole: %d (%d of them the write in flight, landed whole); lost: %d; temporary files left by the kills (each removed by the next write in its folder): %d",
		rounds, total.Load(), checked, found, landed, lost, leftover)
}

// TestFileWriteOnFullDiskKeepsOldContent replaces a file through the
// file API of a real daemon whose disk is full. The write is refused and
// the file keeps its old content, whole; once space is back the write
// works. files/edit the same.
func TestFileWriteOnFullDiskKeepsOldContent(t *testing.T) {
	mnt := testenv.LoopFS(t, 96<<20, "mkfs.ext4", []string{"-q"}, "")
	d := newDaemonAt(t, filepath.Join(mnt, "data"))
	ctx := context.Background()
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	oldContent := strings.Repeat("old line\n", 20000)
	newContent := strings.Repeat("new line!\n", 200000)
	if _, err := c.Files().Write(ctx, "default", "full", api.WriteFileRequest{Path: "keep.txt", Run: "r", Content: oldContent}); err != nil {
		t.Fatal(err)
	}
	filler := testenv.FillDisk(t, mnt)

	_, err := c.Files().Write(ctx, "default", "full", api.WriteFileRequest{Path: "keep.txt", Run: "r", Content: newContent})
	if err == nil || !errors.Is(err, api.ErrNoSpace) {
		t.Fatalf("write on a full disk: %v; want a no_space refusal", err)
	}
	_, err = c.Files().Edit(ctx, "default", "full", api.EditFileRequest{Path: "keep.txt", Run: "r", Old: "old line", New: strings.Repeat("x", 64), All: true})
	if err == nil || !errors.Is(err, api.ErrNoSpace) {
		t.Fatalf("edit on a full disk: %v; want a no_space refusal", err)
	}
	r, err := c.Files().Read(ctx, "default", "full", api.ReadFileRequest{Path: "keep.txt", Run: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != oldContent {
		t.Fatalf("after refused writes the file holds %d bytes, want its old %d", len(r.Content), len(oldContent))
	}
	d.alive()

	must(t, os.Remove(filler))
	syscall.Sync()
	if _, err := c.Files().Write(ctx, "default", "full", api.WriteFileRequest{Path: "keep.txt", Run: "r", Content: newContent}); err != nil {
		t.Fatalf("write once space is back: %v", err)
	}
	r, err = c.Files().Read(ctx, "default", "full", api.ReadFileRequest{Path: "keep.txt", Run: "r"})
	if err != nil || r.Content != newContent {
		t.Fatalf("read after the write: %d bytes, %v", len(r.Content), err)
	}
}
