package image

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"warren/internal/imagetest"
	"warren/internal/testenv"
)

// helperVar names what the test binary does when it runs as a helper.
const helperVar = "WARREN_IMAGE_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperVar) == "pull" {
		// A daemon's store pulling: killed by the test before it ends.
		s, err := Open(context.Background(), Config{
			Dir: os.Getenv("WARREN_IMAGE_DIR"), Registries: []string{os.Getenv("WARREN_IMAGE_REGISTRY")},
		})
		if err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		_, err = s.Pull(context.Background(), os.Getenv("WARREN_IMAGE_REF"), nil)
		fmt.Println("pull ended:", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// TestKill9MidPull: a process killed with -9 while a blob is half
// downloaded leaves nothing a new Open keeps, and a new pull finishes.
func TestKill9MidPull(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	big := make([]byte, 1<<20)
	rand.Read(big)
	img := imagetest.ImageWith(t, nil,
		imagetest.Layer(t, file("small", "s")),
		imagetest.Layer(t, file("big", string(big))),
	)
	reg.Push(t, "kill:1", img)
	m, _ := img.Manifest()
	bigLayer := m.Layers[1].Digest.String()

	halfway := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if d, ok := imagetest.BlobDigest(r); !ok || d != bigLayer || r.Method != http.MethodGet {
			return false
		}
		w.Header().Set("Content-Length", strconv.FormatInt(m.Layers[1].Size, 10))
		w.Write(make([]byte, m.Layers[1].Size/2))
		w.(http.Flusher).Flush()
		once.Do(func() { close(halfway) })
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	})
	// Before the server's own cleanup, which waits for its handlers.
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	sb := newSandbox(t)
	testenv.RequireRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperVar+"=pull", "WARREN_IMAGE_DIR="+sb.dir,
		"WARREN_IMAGE_REGISTRY="+reg.Host, "WARREN_IMAGE_REF="+reg.Ref("kill:1"))
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := testenv.StartTied(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-halfway:
	case err := <-exited:
		t.Fatalf("the pulling process ended first: %v\n%s", err, out)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("the blob was never half sent\n%s", out)
	}
	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	<-exited
	close(release)
	reg.Intercept(nil)

	s := &Store{tmp: sb.dir + "/tmp"}
	if names := dirNames(t, s.tmp); len(names) == 0 {
		t.Fatal("the killed pull left no work in tmp: the test killed nothing under way")
	}
	st := openStore(t, sb, reg, nil)
	checkEmpty(t, st)
	got, err := st.Pull(ctxT(t), reg.Ref("kill:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := readFile(t, got.Root+"/big"); b != string(big) {
		t.Error("big differs after the pull")
	}
	sb.checkCanary(t)
}
