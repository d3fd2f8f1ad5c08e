package testenv

import (
	"fmt"
	"testing"

	"warren/internal/toolserver"
)

// S3 is a real S3-compatible server that S3Server started for one test:
// SeaweedFS's `weed server -s3` (a master, a volume server, a filer and
// the S3 gateway in one process) on loopback ports, with its data in the
// test's temporary folder (toolserver.S3Server). Clients sign with
// AccessKey and SecretKey.
type S3 struct {
	Endpoint  string // http://127.0.0.1:PORT
	Host      string // 127.0.0.1:PORT, for clients that take the scheme apart (minio-go)
	AccessKey string
	SecretKey string
	Region    string

	srv *toolserver.S3Server
}

// S3Server starts an S3-compatible server, waits until it serves requests
// and stops it when the test ends. It builds the server from tools/s3 the
// first time (several minutes from a cold build cache; see
// toolserver.Tool.Binary). If the server cannot be built or started, the
// test stops as CannotRun says: a failure when CI=true, a skip elsewhere.
func S3Server(t testing.TB) *S3 {
	t.Helper()
	bin, err := toolserver.S3.Binary(t.Logf)
	if err != nil {
		CannotRun(t, "this test needs an S3 server built from %s: %v", toolserver.S3Dir, err)
	}
	srv, err := toolserver.StartS3(bin, t.TempDir())
	if err != nil {
		CannotRun(t, "start an S3 server: %v", err)
	}
	// It runs before t.TempDir removes the data.
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() {
			t.Logf("S3 server, end of its log:\n%s", srv.LogTail(15))
		}
	})
	return &S3{
		Endpoint: srv.Endpoint, Host: srv.Host,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
		srv: srv,
	}
}

// URL is the store URL (warren serve --snapshots, replica.NewS3) of
// prefix in bucket on this server, in plain HTTP.
func (s *S3) URL(bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s&insecure=1", bucket, prefix, s.Host, s.Region)
}

// UseCredentials sets, for the rest of the test, the AWS variables that
// the store's clients read (daemons the test starts inherit them): this
// server's keys.
func (s *S3) UseCredentials(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
}

// MakeBucket creates the bucket name.
func (s *S3) MakeBucket(t testing.TB, name string) {
	t.Helper()
	if err := s.srv.MakeBucket(name); err != nil {
		t.Fatal(err)
	}
}

// Kill stops the server at once with SIGKILL, as a crash would, and waits
// until the process is gone: the store refuses connections until Restart.
// Its data stays.
func (s *S3) Kill(t testing.TB) {
	t.Helper()
	if !s.srv.Kill() {
		t.Fatalf("S3 server: Kill of a server that is down")
	}
}

// Restart starts the server again on its ports and data, and waits until
// it serves reads and writes (about 16 s; toolserver.S3Server.Restart).
func (s *S3) Restart(t testing.TB) {
	t.Helper()
	if err := s.srv.Restart(); err != nil {
		t.Fatal(err)
	}
}

// Pause stops the server with SIGSTOP and waits until it is stopped: the
// store accepts connections and answers nothing, as a hung or partitioned
// one would, until Resume.
func (s *S3) Pause(t testing.TB) {
	t.Helper()
	if err := s.srv.Pause(); err != nil {
		t.Fatal(err)
	}
}

// Resume continues a paused server and waits until it serves requests.
func (s *S3) Resume(t testing.TB) {
	t.Helper()
	if err := s.srv.Resume(); err != nil {
		t.Fatal(err)
	}
}
