package snapshot

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The benchmarks build a workspace of 100,000 small files in 1,000
// folders (on the tests' temporary folder: a tmpfs where there is one, see
// TestMain; SNAPSHOT_TEST_DISK=1 puts it on the disk) into a repository
// on the machine's disk (diskTempDir), since what they measure is mostly
// what making objects durable costs. Making the workspace takes a while,
// outside the timing. To measure on the disk alone:
//
//	SNAPSHOT_TEST_DISK=1 TMPDIR=/var/tmp go test -run '^$' -bench Build -benchtime 5x ./snapshot/

const benchFolders, benchPerFolder = 1000, 100

// benchRepo opens a repository in a new folder of the machine's disk,
// closed at the benchmark's end.
func benchRepo(b *testing.B) *Repo {
	b.Helper()
	r, err := Open(filepath.Join(diskTempDir(b), "repo"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

// BenchmarkBuildIncremental: 10 files changed in the big workspace, built
// from the previous tree.
func BenchmarkBuildIncremental(b *testing.B) {
	r := benchRepo(b)
	dir := b.TempDir()
	makeWide(b, dir, benchFolders, benchPerFolder)
	base, _ := build(b, r, dir, Hash{}, nil, true)
	spreadAll(b, r) // the first build's objects, untimed
	round := 0
	var read int64
	for b.Loop() {
		b.StopTimer()
		round++
		var changes []Change
		for i := range 10 {
			p := fmt.Sprintf("d%03d/f%03d", (i*97+round)%benchFolders, (i*13+round)%benchPerFolder)
			if err := os.WriteFile(filepath.Join(dir, p), []byte(fmt.Sprintf("round %d, file %d\n", round, i)), 0o644); err != nil {
				b.Fatal(err)
			}
			changes = append(changes, Change{Path: p})
		}
		b.StartTimer()
		h, st := build(b, r, dir, base, changes, false)
		base = h
		read += st.Read
	}
	b.ReportMetric(float64(read)/float64(b.N), "read/op")
}

// BenchmarkBuildFull: a full walk of the big workspace, whose content the
// repository holds already (the first build, which writes it all, is not
// timed).
func BenchmarkBuildFull(b *testing.B) {
	r := benchRepo(b)
	dir := b.TempDir()
	makeWide(b, dir, benchFolders, benchPerFolder)
	build(b, r, dir, Hash{}, nil, true)
	spreadAll(b, r)
	var read int64
	for b.Loop() {
		_, st := build(b, r, dir, Hash{}, nil, true)
		read += st.Read
	}
	b.ReportMetric(float64(read)/float64(b.N), "read/op")
}

// BenchmarkBuildFirst: the first checkpoint of the big workspace, into an
// empty repository: every file and folder is a new object. Each round has
// a repository of its own. close-ms/op is what Close took after the
// build, untimed: the work a build leaves for later, if any.
func BenchmarkBuildFirst(b *testing.B) {
	dir := b.TempDir()
	makeWide(b, dir, benchFolders, benchPerFolder)
	var closing time.Duration
	for b.Loop() {
		b.StopTimer()
		r, err := Open(filepath.Join(diskTempDir(b), "repo"))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		build(b, r, dir, Hash{}, nil, true)
		b.StopTimer()
		start := time.Now()
		if err := r.Close(); err != nil {
			b.Fatal(err)
		}
		closing += time.Since(start)
		b.StartTimer()
	}
	b.ReportMetric(float64(closing.Milliseconds())/float64(b.N), "close-ms/op")
}

// BenchmarkMakeDurable measures what making n spread objects durable
// costs on the machine's disk, the two ways the spreader can: fsyncs in
// parallel (with their folders), or one syncfs. The objects are placed
// loose, unsynced, outside the timing.
func BenchmarkMakeDurable(b *testing.B) {
	for _, n := range []int{1, 10, parallelSyncMax, 100, 1000} {
		for _, how := range []string{"fsync", "syncfs"} {
			b.Run(fmt.Sprintf("objects=%d/%s", n, how), func(b *testing.B) {
				r, err := Open(filepath.Join(diskTempDir(b), "repo"))
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				round := 0
				for b.Loop() {
					b.StopTimer()
					var ds durableSet
					for i := range n {
						round++
						data := []byte(fmt.Sprintf("object %d", round*10000+i))
						h := sum(data)
						if err := r.placeLoose(h, false, func(w io.Writer) error {
							_, err := w.Write(append([]byte{formatRaw}, data...))
							return err
						}); err != nil {
							b.Fatal(err)
						}
						ds.add(h)
					}
					b.StartTimer()
					if how == "fsync" {
						err = r.fsyncObjects(&ds)
					} else {
						err = r.syncfs()
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
