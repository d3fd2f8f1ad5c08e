package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Store is a Store in a bucket of an S3-compatible server, below a
// prefix: a key is the object prefix/key. A PUT is atomic on such a
// server (a key holds all of one or nothing of it), and durable once
// acknowledged.
//
// The client does not retry: a failed request is an error at once, and
// the caller's retries (with their backoff) are the only ones, so that
// one policy governs, and NewS3 says at once that a server is not there.
type S3Store struct {
	client *minio.Client
	core   minio.Core // the same client: a GET as one plain request
	bucket string
	prefix string // "" or ending in "/"
	where  string // the URL NewS3 was given, for messages
}

var _ Store = (*S3Store)(nil)

// s3PartSize is the part size of multipart uploads: a PUT of up to this
// many bytes (every pack but the big objects') is one request; the
// client buffers one part of a bigger one in memory at a time.
const s3PartSize = 32 << 20

// responseHeaderTimeout bounds the wait for a response's headers once a
// request is sent: a 16 MiB pack's PUT is answered in well under it on
// any link fit for a store.
const responseHeaderTimeout = 20 * time.Second

// NewS3 opens the store a URL names:
//
//	s3://BUCKET[/PREFIX]?endpoint=HOST[:PORT][&region=REGION][&insecure=1]
//
// endpoint is the server's address (required: there is no default
// server); region is the bucket's, where the server wants one signed
// (else the client asks the server); insecure=1 speaks plain HTTP, for a
// server on loopback such as the tests'. Credentials come from
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN),
// else from the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, or
// ~/.aws/credentials; the profile AWS_PROFILE names, else "default");
// with neither, requests go unsigned. NewS3 asks the server whether the
// bucket exists, so that a server out of reach, refused credentials or a
// missing bucket are an error here, not at the first upload.
func NewS3(ctx context.Context, rawURL string) (*S3Store, error) {
	s, endpoint, opts, err := parseS3(rawURL)
	if err != nil {
		return nil, err
	}
	opts.Creds = credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
	})
	opts.MaxRetries = 1
	// A server that accepts the connection and then says nothing (hung,
	// stopped) fails a request after this, not after minio's minute: an
	// upload retries sooner, and a move's first call is not held long.
	tr, err := minio.DefaultTransport(opts.Secure)
	if err != nil {
		return nil, fmt.Errorf("replica: open %s: %w", s.where, err)
	}
	tr.ResponseHeaderTimeout = responseHeaderTimeout
	opts.Transport = tr
	client, err := minio.New(endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("replica: open %s: %w", s.where, err)
	}
	s.client, s.core = client, minio.Core{Client: client}
	ok, err := client.BucketExists(ctx, s.bucket)
	if err != nil {
		return nil, fmt.Errorf("replica: open %s: reach bucket %q at %s: %w", s.where, s.bucket, endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("replica: open %s: no bucket %q at %s", s.where, s.bucket, endpoint)
	}
	return s, nil
}

// parseS3 reads a store URL (see NewS3) into a store without its client,
// the endpoint and the client's options.
func parseS3(rawURL string) (*S3Store, string, *minio.Options, error) {
	fail := func(format string, args ...any) (*S3Store, string, *minio.Options, error) {
		return nil, "", nil, fmt.Errorf("replica: store URL %q: "+format, append([]any{rawURL}, args...)...)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return fail("%v", err)
	}
	if u.Scheme != "s3" {
		return fail("want s3://bucket/prefix?endpoint=host:port")
	}
	if u.Host == "" || u.User != nil || u.Port() != "" {
		return fail("want a bucket name after s3://")
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" && !validKey(prefix, false) {
		return fail("prefix %q: %v", prefix, errBadKey)
	}
	if prefix != "" {
		prefix += "/"
	}
	q := u.Query()
	for k, v := range q {
		if len(v) != 1 {
			return fail("%s given %d times", k, len(v))
		}
		switch k {
		case "endpoint", "region", "insecure":
		default:
			return fail("unknown parameter %q (want endpoint, region, insecure)", k)
		}
	}
	endpoint := q.Get("endpoint")
	if endpoint == "" || strings.Contains(endpoint, "/") {
		return fail("want endpoint=host[:port] (the server's address, without a scheme)")
	}
	opts := &minio.Options{Region: q.Get("region"), Secure: true}
	switch q.Get("insecure") {
	case "", "0", "false":
	case "1", "true":
		opts.Secure = false
	default:
		return fail("insecure=%q: want 1 or 0", q.Get("insecure"))
	}
	return &S3Store{bucket: u.Host, prefix: prefix, where: rawURL}, endpoint, opts, nil
}

// String names the store: the URL it was opened with.
func (s *S3Store) String() string { return s.where }

// mapErr turns the server's "no such key" into ErrNotFound.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	if resp.Code == minio.NoSuchKey || resp.StatusCode == http.StatusNotFound && resp.Code != minio.NoSuchBucket {
		return fmt.Errorf("%w (%v)", ErrNotFound, err)
	}
	return err
}

func (s *S3Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("replica: put: %w", err)
	}
	_, err := s.client.PutObject(ctx, s.bucket, s.prefix+key, &exactReader{r: r, left: size}, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		PartSize:    s3PartSize,
	})
	if err != nil {
		return fmt.Errorf("replica: put %s: %w", key, err)
	}
	return nil
}

func (s *S3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("replica: get: %w", err)
	}
	rc, _, _, err := s.core.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("replica: get %s: %w", key, mapErr(err))
	}
	return rc, nil
}

func (s *S3Store) Stat(ctx context.Context, key string) (Info, error) {
	if err := checkKey(key); err != nil {
		return Info{}, fmt.Errorf("replica: stat: %w", err)
	}
	info, err := s.client.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, fmt.Errorf("replica: stat %s: %w", key, mapErr(err))
	}
	return Info{Key: key, Size: info.Size, ModTime: info.LastModified}, nil
}

func (s *S3Store) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := checkPrefix(prefix); err != nil {
		return fmt.Errorf("replica: list: %w", err)
	}
	objs := s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true})
	for obj := range objs {
		if obj.Err != nil {
			return fmt.Errorf("replica: list %q: %w", prefix, obj.Err)
		}
		key, ok := strings.CutPrefix(obj.Key, s.prefix)
		if !ok || !validKey(key, false) {
			continue // not one this store would have written
		}
		if err := fn(Info{Key: key, Size: obj.Size, ModTime: obj.LastModified}); err != nil {
			return err
		}
	}
	return nil
}

func (s *S3Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("replica: delete: %w", err)
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	if err != nil && !errors.Is(mapErr(err), ErrNotFound) {
		return fmt.Errorf("replica: delete %s: %w", key, err)
	}
	return nil
}

// removeAborted aborts the multipart uploads below the store's prefix
// begun before the time given: those of Puts cut short (a kill -9, a
// network lost), whose parts the server keeps, unseen by List, until
// they are aborted. Each is aborted by its upload id, so that a Put of
// the same key under way keeps its own.
func (s *S3Store) removeAborted(ctx context.Context, before time.Time) (int, error) {
	var old []minio.ObjectMultipartInfo
	var listErr error
	// Read to the end: the client's goroutine ends with the channel.
	for u := range s.client.ListIncompleteUploads(ctx, s.bucket, s.prefix, true) {
		switch {
		case u.Err != nil:
			listErr = u.Err
		case u.Initiated.Before(before) && strings.HasPrefix(u.Key, s.prefix):
			old = append(old, u)
		}
	}
	if listErr != nil {
		return 0, fmt.Errorf("replica: list the uploads cut short: %w", listErr)
	}
	n := 0
	for _, u := range old {
		err := s.core.AbortMultipartUpload(ctx, s.bucket, u.Key, u.UploadID)
		if err != nil && minio.ToErrorResponse(err).Code != "NoSuchUpload" {
			return n, fmt.Errorf("replica: abort the upload of %s: %w", u.Key, err)
		}
		if err == nil {
			n++
		}
	}
	return n, nil
}
