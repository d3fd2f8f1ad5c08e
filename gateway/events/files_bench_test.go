package events

import (
	"path/filepath"
	"strconv"
	"testing"

	"warren/api"
	"warren/fs"
	"warren/meta"
)

// BenchmarkFileEventPath is what the file events of one new file cost
// while a reader follows the thread: its creation (told at once:
// published, logged, queued for the reader, inside the FUSE request) and
// its change (held in the creation's window, told by the window
// goroutine). It makes files far faster than any mount does, so the
// window goroutine's walk over the held paths weighs more here than in
// an untar.
func BenchmarkFileEventPath(b *testing.B) {
	br := newBroker(DefaultBuffer)
	l, err := openEventLog(filepath.Join(b.TempDir(), "events.log"), DefaultLogSize)
	if err != nil {
		b.Fatal(err)
	}
	br.attachLog(l)
	defer br.close()
	sub, err := br.subscribe(eventFilter{thread: "t"})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range sub.ch {
		}
	}()
	fe := newFileEvents(func(ev api.Event) { br.Emit(ev) })
	defer fe.close()
	k := meta.ThreadKey{Tenant: "default", Thread: "t"}
	changed := fe.of(k)
	actor := fs.Actor{}
	for i := 0; b.Loop(); i++ {
		p := "/go/src/cmd/compile/internal/ssa/file" + strconv.Itoa(i) + ".go"
		changed(fs.EntryChange{Kind: fs.Created, Path: p, Actor: actor, Version: 1})
		changed(fs.EntryChange{Kind: fs.Changed, Path: p, Actor: actor, Version: 2})
	}
}
