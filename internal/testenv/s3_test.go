package testenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// s3Client returns a minio-go client of s signed with accessKey and
// secretKey. It does not retry: the tests see each answer as it is.
func s3Client(t *testing.T, s *S3, accessKey, secretKey string) *minio.Client {
	t.Helper()
	c, err := minio.New(s.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(accessKey, secretKey, ""),
		Region:       s.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// randomBytes returns n bytes from a generator seeded with seed, so a
// failure can be reproduced.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func getObject(t *testing.T, c *minio.Client, bucket, key string) []byte {
	t.Helper()
	o, err := c.GetObject(t.Context(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	defer o.Close()
	data, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	return data
}

func putObject(t *testing.T, c *minio.Client, bucket, key string, data []byte) {
	t.Helper()
	_, err := c.PutObject(t.Context(), bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
	if err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
}

func listKeys(t *testing.T, c *minio.Client, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range c.ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("list %s/%s: %v", bucket, prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// TestS3Server runs the operations warren's snapshots will use against a
// real server, through the client they will use: buckets, PUT, GET, LIST,
// DELETE, a multipart upload, and a refusal of wrong credentials.
func TestS3Server(t *testing.T) {
	s := S3Server(t)
	if !strings.HasPrefix(s.Endpoint, "http://127.0.0.1:") || s.Endpoint != "http://"+s.Host {
		t.Fatalf("Endpoint %q, Host %q: want http://127.0.0.1:PORT and its host", s.Endpoint, s.Host)
	}
	c := s3Client(t, s, s.AccessKey, s.SecretKey)
	ctx := t.Context()

	s.MakeBucket(t, "snapshots")
	buckets, err := c.ListBuckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(buckets) != 1 || buckets[0].Name != "snapshots" {
		t.Fatalf("ListBuckets: got %v, want just snapshots", buckets)
	}

	// PUT and GET: the bytes come back as they went.
	small := randomBytes(100_000, 1)
	putObject(t, c, "snapshots", "t1/a", small)
	putObject(t, c, "snapshots", "t1/b", []byte("b"))
	putObject(t, c, "snapshots", "t2/c", []byte("c"))
	if got := getObject(t, c, "snapshots", "t1/a"); !bytes.Equal(got, small) {
		t.Fatalf("get t1/a: %d bytes differ from the %d put", len(got), len(small))
	}

	// LIST, by prefix.
	if got, want := listKeys(t, c, "snapshots", "t1/"), []string{"t1/a", "t1/b"}; !slices.Equal(got, want) {
		t.Fatalf("list t1/: got %v, want %v", got, want)
	}

	// DELETE: the object is gone from GET and LIST.
	if err := c.RemoveObject(ctx, "snapshots", "t1/b", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.StatObject(ctx, "snapshots", "t1/b", minio.StatObjectOptions{})
	if code := minio.ToErrorResponse(err).Code; code != minio.NoSuchKey {
		t.Fatalf("stat of a deleted object: got %v (code %q), want %s", err, code, minio.NoSuchKey)
	}
	if got, want := listKeys(t, c, "snapshots", ""), []string{"t1/a", "t2/c"}; !slices.Equal(got, want) {
		t.Fatalf("list after delete: got %v, want %v", got, want)
	}

	// A multipart upload of 12 MiB in parts of 5, 5 and 2 MiB, each part
	// a request of its own, then the whole read back.
	big := randomBytes(12<<20, 2)
	core := minio.Core{Client: c}
	id, err := core.NewMultipartUpload(ctx, "snapshots", "big", minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var parts []minio.CompletePart
	for i, off := 1, 0; off < len(big); i++ {
		end := min(off+5<<20, len(big))
		p, err := core.PutObjectPart(ctx, "snapshots", "big", id, i, bytes.NewReader(big[off:end]), int64(end-off), minio.PutObjectPartOptions{})
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		parts = append(parts, minio.CompletePart{PartNumber: i, ETag: p.ETag})
		off = end
	}
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3", len(parts))
	}
	if _, err := core.CompleteMultipartUpload(ctx, "snapshots", "big", id, parts, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := c.StatObject(ctx, "snapshots", "big", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(big)) {
		t.Fatalf("stat big: size %d, want %d", info.Size, len(big))
	}
	if got := getObject(t, c, "snapshots", "big"); sha256.Sum256(got) != sha256.Sum256(big) {
		t.Fatalf("get big: %d bytes differ from the %d uploaded", len(got), len(big))
	}

	// Wrong credentials are refused with 403, a wrong secret or an
	// unknown key alike, and change nothing.
	for _, creds := range [][2]string{{s.AccessKey, "not-the-secret"}, {"NOSUCHACCESSKEY00000", s.SecretKey}} {
		bad := s3Client(t, s, creds[0], creds[1])
		_, err := bad.ListBuckets(ctx)
		if code := minio.ToErrorResponse(err).StatusCode; code != http.StatusForbidden {
			t.Errorf("ListBuckets as %s/%s: got %v (status %d), want 403", creds[0], creds[1], err, code)
		}
		_, err = bad.PutObject(ctx, "snapshots", "t1/a", strings.NewReader("x"), 1, minio.PutObjectOptions{})
		if code := minio.ToErrorResponse(err).StatusCode; code != http.StatusForbidden {
			t.Errorf("PutObject as %s/%s: got %v (status %d), want 403", creds[0], creds[1], err, code)
		}
	}
	if got := getObject(t, c, "snapshots", "t1/a"); !bytes.Equal(got, small) {
		t.Fatalf("t1/a changed after refused writes")
	}
}

// TestS3ServerKillRestart kills the server, sees the store refuse
// connections, and restarts it on the same port and data.
func TestS3ServerKillRestart(t *testing.T) {
	s := S3Server(t)
	c := s3Client(t, s, s.AccessKey, s.SecretKey)
	s.MakeBucket(t, "kept")
	data := randomBytes(1<<20, 3)
	putObject(t, c, "kept", "before", data)

	pid := s.srv.Pid()
	s.Kill(t)
	_, err := c.ListBuckets(t.Context())
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("ListBuckets of a killed server: got %v, want connection refused", err)
	}

	s.Restart(t)
	if s.srv.Pid() == pid {
		t.Errorf("restarted server has the killed one's pid %d", pid)
	}
	if got := getObject(t, c, "kept", "before"); !bytes.Equal(got, data) {
		t.Fatalf("an object put before the kill: %d bytes differ from the %d put", len(got), len(data))
	}
	// Writes work at once, to a bucket of before and to a new one.
	putObject(t, c, "kept", "after", []byte("after"))
	s.MakeBucket(t, "fresh")
	putObject(t, c, "fresh", "x", []byte("x"))
	if got := listKeys(t, c, "kept", ""); !slices.Equal(got, []string{"after", "before"}) {
		t.Fatalf("list kept after restart: %v", got)
	}
}

// TestS3ServerPauseResume pauses the server, sees a request go
// unanswered, and resumes it.
func TestS3ServerPauseResume(t *testing.T) {
	s := S3Server(t)
	c := s3Client(t, s, s.AccessKey, s.SecretKey)
	s.MakeBucket(t, "kept")

	s.Pause(t)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err := c.ListBuckets(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ListBuckets of a paused server: got %v, want the context's deadline", err)
	}

	s.Resume(t)
	putObject(t, c, "kept", "k", []byte("v"))
	if got := getObject(t, c, "kept", "k"); string(got) != "v" {
		t.Fatalf("get after resume: %q", got)
	}
}
