package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/imagetest"
	"warren/meta"
)

// imageDirs counts the unpacked images in a data folder's image store:
// the folders of its roots.
func imageDirs(t *testing.T, dataDir string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dataDir, "images", "roots"))
	if err != nil {
		t.Fatalf("read the image store: %v", err)
	}
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			n++
		}
	}
	return n
}

// TestImages: threads on images A and B at once see their own image's
// files, variables and shell, and not the host's; a thread without an
// image sees the host's folders as before; the images are listed with
// their threads, removing one a bound thread uses is refused, a running
// jail keeps its image, and a registry the server does not allow is
// refused.
func TestImages(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	refA, digestA := reg.Push(t, "team/a:1", imagetest.Busybox(t, "image A"))
	refB, _ := reg.Push(t, "team/b:1", imagetest.Busybox(t, "image B",
		imagetest.File{Path: "usr/local", Dir: true}, imagetest.File{Path: "usr/local/bin", Dir: true},
		imagetest.File{Path: "usr/local/bin/hello-b", Body: "#!/bin/sh\necho hello from B\n", Mode: 0o755}))
	env := startEnv(t, Config{Registries: []string{reg.Host}})
	ctx := t.Context()

	var wg sync.WaitGroup
	for _, tc := range []struct{ thread, ref string }{{"on-a", refA}, {"on-b", refB}} {
		wg.Go(func() {
			if _, err := env.c.BindWith(ctx, "acme", tc.thread, meta.Settings{Image: tc.ref}); err != nil {
				t.Errorf("bind %s on %s: %v", tc.thread, tc.ref, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ti, err := env.c.Thread(ctx, "acme", "on-a")
	if err != nil {
		t.Fatal(err)
	}
	if ti.Settings.Image != refA || ti.Settings.ImageDigest != digestA {
		t.Errorf("settings of on-a: image %q digest %q; want %q pinned to %q", ti.Settings.Image, ti.Settings.ImageDigest, refA, digestA)
	}

	probe := `cat /marker; echo "$IMAGE_NAME|$HOME|$PATH"; test -e /usr/bin/python3 && echo host-python; ` +
		`test -e /usr/bin/git && echo host-git; readlink /proc/self/exe; id -un; pwd; touch /etc/x 2>/dev/null && echo wrote-etc; echo ok`
	for _, tc := range []struct{ thread, name string }{{"on-a", "image A"}, {"on-b", "image B"}} {
		code, out := env.run(t, tc.thread, probe)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.thread, code, out)
		}
		want := tc.name + "\n" + tc.name + "|/home/agent|/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin\n"
		if !strings.HasPrefix(out, want) {
			t.Errorf("%s: the probe said\n%s\nwant it to start with\n%s", tc.thread, out, want)
		}
		for _, bad := range []string{"host-python", "host-git", "wrote-etc"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s: %s: the jail sees or writes the host's files:\n%s", tc.thread, bad, out)
			}
		}
		if !strings.Contains(out, "/bin/busybox\n") || !strings.Contains(out, "/workspace\n") {
			t.Errorf("%s: want the image's busybox as the shell and /workspace as the folder:\n%s", tc.thread, out)
		}
	}
	if code, out := env.run(t, "on-b", "hello-b"); code != 0 || out != "hello from B\n" {
		t.Errorf("on-b: hello-b from the image's PATH: exit %d, %q", code, out)
	}
	if code, out := env.run(t, "on-a", "hello-b"); code == 0 {
		t.Errorf("on-a runs image B's hello-b: %q", out)
	}
	// A thread without an image: the host's folders, as before.
	if code, out := env.run(t, "plain", "test -e /usr/bin/python3 && test ! -e /marker && echo host"); code != 0 || out != "host\n" {
		t.Errorf("a thread without an image: exit %d, %q; want the host's folders", code, out)
	}

	list, err := env.c.Images().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Images) != 2 || list.StoreBytes <= 0 {
		t.Fatalf("images: %+v; want A and B and the store's size", list)
	}
	for _, img := range list.Images {
		want := map[string]string{refA: "acme/on-a", refB: "acme/on-b"}[img.Ref]
		if len(img.Threads) != 1 || !strings.Contains(img.Threads[0], "on-") || !strings.HasSuffix(strings.ReplaceAll(img.Threads[0], `"`, ""), want) {
			t.Errorf("image %s: threads %q; want %s", img.Ref, img.Threads, want)
		}
	}

	// Removing an image a bound thread uses is refused; a running jail
	// keeps its image.
	var ae *api.APIError
	if err := env.c.Images().Remove(ctx, refA); !errors.As(err, &ae) || ae.Code != api.CodeConflict || !strings.Contains(ae.Message, "on-a") {
		t.Errorf("remove A while on-a uses it: %v; want 409 naming the thread", err)
	}
	if _, err := env.c.BindWith(ctx, "acme", "on-b", meta.Settings{Image: refA}); !errors.As(err, &ae) || ae.Code != api.CodeConflict || !strings.Contains(ae.Message, "image") {
		t.Errorf("change on-b's image while its jail runs: %v; want 409 about the image", err)
	}
	// Closed, it takes the new image at its next jail.
	if _, err := env.c.CloseThread(ctx, "acme", "on-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.BindWith(ctx, "acme", "on-b", meta.Settings{Image: refA}); err != nil {
		t.Fatalf("bind on-b on A once closed: %v", err)
	}
	if code, out := env.run(t, "on-b", "cat /marker"); code != 0 || out != "image A\n" {
		t.Errorf("on-b after its image changed: exit %d, %q; want image A", code, out)
	}
	if err := env.c.Images().Remove(ctx, refB); err != nil {
		t.Errorf("remove B, which no bound thread uses: %v", err)
	}
	if list, err := env.c.Images().List(ctx); err != nil || len(list.Images) != 1 || imageDirs(t, env.cfg.DataDir) != 1 {
		t.Errorf("after B went: %+v, %v, %d roots; want only A", list, err, imageDirs(t, env.cfg.DataDir))
	}

	// A registry the server does not list.
	other := imagetest.StartRegistry(t)
	refC, _ := other.Push(t, "team/c:1", imagetest.Busybox(t, "image C"))
	if _, err := env.c.Images().Pull(ctx, refC); !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
		t.Errorf("pull from a registry not in --registries: %v; want 403", err)
	}
	if got := other.BlobGets(); got != 0 {
		t.Errorf("the refused registry served %d blobs", got)
	}
	if _, err := env.c.BindWith(ctx, "acme", "on-c", meta.Settings{Image: refC}); !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
		t.Errorf("bind on an image of a registry not in --registries: %v; want 403", err)
	}
	if _, err := env.c.Thread(ctx, "acme", "on-c"); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Errorf("a refused bind left a thread: %v", err)
	}
}

// TestImageOnce: 50 threads binding one image at once pull it once and
// share one unpacked copy; the pull's progress comes as frames; an image
// loaded from an archive runs a thread too.
func TestImageOnce(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	ref, digest := reg.Push(t, "team/once:1", imagetest.Busybox(t, "once",
		imagetest.File{Path: "big", Body: strings.Repeat("x", 4<<20)}))
	env := startEnv(t, Config{Registries: []string{reg.Host}})
	ctx := t.Context()
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := env.c.BindWith(ctx, "acme", fmt.Sprintf("t%d", i), meta.Settings{Image: ref}); err != nil {
				t.Errorf("bind t%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	// The image's blobs: its two layers and its config, each once.
	if got := reg.BlobGets(); got != 3 {
		t.Errorf("%d binds at once fetched %d blobs; want each of the 3 once", n, got)
	}
	if got := imageDirs(t, env.cfg.DataDir); got != 1 {
		t.Errorf("%d unpacked images on disk; want one", got)
	}
	list, err := env.c.Images().List(ctx)
	if err != nil || len(list.Images) != 1 || len(list.Images[0].Threads) != n || list.Images[0].Digest != digest {
		t.Fatalf("images: %+v, %v; want one, pinned by %d threads", list, err, n)
	}
	for _, th := range []string{"t0", "t49"} {
		if code, out := env.run(t, th, "cat /marker"); code != 0 || out != "once\n" {
			t.Errorf("%s: exit %d, %q", th, code, out)
		}
	}

	// A pull shows its progress: bytes downloaded, then layers unpacked.
	// The registry holds every blob half-way until the test has seen
	// the download under way.
	ref2, _ := reg.Push(t, "team/progress:1", imagetest.Busybox(t, "progress",
		imagetest.File{Path: "big", Body: strings.Repeat("y", 8<<20)}))
	release := reg.HoldBlobs(t)
	var mu sync.Mutex
	var download, unpack api.Progress
	pctx := client.WithProgress(ctx, func(p api.Progress) {
		mu.Lock()
		defer mu.Unlock()
		switch p.Phase {
		case "download":
			download = p
			if p.Done > 0 {
				release()
			}
		case "unpack":
			unpack = p
		}
	})
	pctx, cancel := context.WithTimeout(pctx, 2*time.Minute)
	defer cancel()
	img, err := env.c.Images().Pull(pctx, ref2)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if download.Done <= 0 || download.Total < 8<<10 || download.Done > download.Total || unpack.Total != 2 || unpack.Done != 2 {
		t.Errorf("the pull's progress: download %+v, unpack %+v; want bytes of the layers, then both layers unpacked", download, unpack)
	}
	mu.Unlock()

	// A thread on an image loaded from an OCI layout archive.
	archive := filepath.Join(t.TempDir(), "loaded.tar")
	imagetest.WriteLayout(t, archive, imagetest.Busybox(t, "loaded"), "example.test/team/loaded:2")
	loaded, err := env.c.Images().Load(ctx, archive, "")
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Ref != "example.test/team/loaded:2" || !loaded.Loaded || loaded.Digest == img.Digest {
		t.Errorf("loaded image: %+v", loaded)
	}
	if _, err := env.c.BindWith(ctx, "acme", "on-loaded", meta.Settings{Image: "example.test/team/loaded:2"}); err != nil {
		t.Fatal(err)
	}
	if code, out := env.run(t, "on-loaded", "cat /marker"); code != 0 || out != "loaded\n" {
		t.Errorf("on-loaded: exit %d, %q", code, out)
	}
}

// TestImageStoreFull: a pull past --image-store-bytes is refused with 507
// and leaves nothing.
func TestImageStoreFull(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	ref, _ := reg.Push(t, "team/big:1", imagetest.Busybox(t, "big",
		imagetest.File{Path: "big", Body: strings.Repeat("z", 6<<20)}))
	env := startEnv(t, Config{Registries: []string{reg.Host}, ImageStoreBytes: 4 << 20})
	var ae *api.APIError
	_, err := env.c.Images().Pull(context.Background(), ref)
	if !errors.As(err, &ae) || ae.Status != 507 {
		t.Fatalf("pull past the store's bound: %v; want 507", err)
	}
	if got := imageDirs(t, env.cfg.DataDir); got != 0 {
		t.Errorf("%d unpacked images left after the refusal", got)
	}
}

// TestImageMoves: a thread taken over from a host that died runs on the
// very image it was pinned to there, by digest, even though its tag has
// moved since; a thread pinned to an image that came from an archive is
// refused with a message saying it is in no registry.
func TestImageMoves(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	ref, digest := reg.Push(t, "team/moving:1", imagetest.Busybox(t, "first"))
	if _, moved := reg.Push(t, "team/moving:1", imagetest.Busybox(t, "second")); moved == digest {
		t.Fatal("the tag did not move")
	}
	store := newStore(t)
	ctx := context.Background()
	lease, err := store.Heartbeat(ctx, "web-1", 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for thread, s := range map[string]meta.Settings{
		"pinned": {Image: ref, ImageDigest: digest},
		"loaded": {Image: "example.test/team/loaded:1", ImageDigest: "sha256:" + strings.Repeat("ab", 32)},
	} {
		k := meta.ThreadKey{Tenant: "acme", Thread: thread}
		root := formerRoot(t, thread, nil)
		if _, err := store.CreateBinding(ctx, meta.Binding{ThreadKey: k, Kind: meta.KindHost, HostID: "web-1", Root: root,
			MountPath: root + "-mnt", BoundAt: time.Now(), State: meta.StateBound, Settings: s}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Pin(ctx, k, "web-1", lease); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if hs, _ := store.ListHosts(ctx); len(hs) > 0 && !hs[0].Alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the former host's lease did not run out")
		}
	}
	env := startEnv(t, Config{HostID: "web-2", Store: store, Registries: []string{reg.Host},
		RenewEvery: 200 * time.Millisecond, ExpiresAfter: 2 * time.Second})
	if code, out := env.run(t, "pinned", "cat /marker"); code != 0 || out != "first\n" {
		t.Errorf("the moved thread: exit %d, %q; want the image it was pinned to", code, out)
	}
	var ae *api.APIError
	_, err = env.c.Exec(ctx, "acme", "loaded", api.ExecRequest{Command: "true"}, nil, nil)
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "warren image load") || !strings.Contains(ae.Message, "example.test/team/loaded") {
		t.Errorf("a moved thread whose image is in no registry: %v; want a message saying to load it here", err)
	}
}

// TestImageCollect: the collector removes the images no bound thread is
// pinned to once none was used for the keep time, and keeps the others.
func TestImageCollect(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	used, _ := reg.Push(t, "team/used:1", imagetest.Busybox(t, "used"))
	idle, _ := reg.Push(t, "team/idle:1", imagetest.Busybox(t, "idle",
		imagetest.File{Path: "idle", Body: "idle\n"}))
	env := startEnv(t, Config{Registries: []string{reg.Host}})
	ctx := t.Context()
	if _, err := env.c.BindWith(ctx, "acme", "on-used", meta.Settings{Image: used}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.Images().Pull(ctx, idle); err != nil {
		t.Fatal(err)
	}
	// Not yet past the keep time: both stay.
	if err := env.g.images.Collect(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if list, err := env.c.Images().List(ctx); err != nil || len(list.Images) != 2 {
		t.Fatalf("before the keep time: %+v, %v", list, err)
	}
	// Past it: the idle one goes, the pinned one stays.
	if err := env.g.images.Collect(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	list, err := env.c.Images().List(ctx)
	if err != nil || len(list.Images) != 1 || list.Images[0].Ref != used || imageDirs(t, env.cfg.DataDir) != 1 {
		t.Fatalf("after collection: %+v, %v; want only %s", list, err, used)
	}
	if code, out := env.run(t, "on-used", "cat /marker"); code != 0 || out != "used\n" {
		t.Errorf("the pinned thread after collection: exit %d, %q", code, out)
	}
}
