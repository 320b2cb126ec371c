// Package objstoretest serves a real S3 server in process for tests: the
// S3 protocol of github.com/johannesboyne/gofakes3 over an in-memory
// backend, behind a check of the request's access key (gofakes3 checks
// none), so that a client with the wrong credentials is refused as a
// cloud service would refuse it.
package objstoretest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is an S3 server.
type Server struct {
	// URL is its endpoint, http://127.0.0.1:PORT.
	URL string
	// AccessKeyID and SecretAccessKey are the credentials it takes.
	AccessKeyID, SecretAccessKey string
	backend                      *s3mem.Backend
}

// credential reads the access key of a SigV4 Authorization header or a
// presigned URL.
var credential = regexp.MustCompile(`Credential=([^/,&]+)/`)

// Serve starts a server that takes the access key id with any secret
// (the signature is not checked) and closes it when the test ends.
func Serve(t testing.TB, accessKeyID, secret string) *Server {
	t.Helper()
	backend := s3mem.New()
	fake := gofakes3.New(backend)
	inner := fake.Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := credential.FindStringSubmatch(r.Header.Get("Authorization") + "&" + r.URL.RawQuery)
		if m == nil || m[1] != accessKeyID {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you provided does not exist in our records.</Message></Error>`)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &Server{URL: srv.URL, AccessKeyID: accessKeyID, SecretAccessKey: secret, backend: backend}
}

// CreateBucket makes a bucket.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	if err := s.backend.CreateBucket(name); err != nil {
		t.Fatal(err)
	}
}

// Put stores an object.
func (s *Server) Put(t testing.TB, bucket, key string, body []byte) {
	t.Helper()
	meta := map[string]string{"Last-Modified": time.Now().UTC().Format(http.TimeFormat), "Content-Type": "application/octet-stream"}
	if _, err := s.backend.PutObject(bucket, key, meta, bytes.NewReader(body), int64(len(body)), nil); err != nil {
		t.Fatal(err)
	}
}

// Get reads an object; false when there is none.
func (s *Server) Get(t testing.TB, bucket, key string) ([]byte, bool) {
	t.Helper()
	obj, err := s.backend.GetObject(bucket, key, nil)
	if err != nil {
		return nil, false
	}
	defer obj.Contents.Close()
	b, err := io.ReadAll(obj.Contents)
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

// Keys lists the keys of a bucket under prefix.
func (s *Server) Keys(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	p := gofakes3.NewPrefix(&prefix, nil)
	list, err := s.backend.ListBucket(bucket, &p, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range list.Contents {
		keys = append(keys, c.Key)
	}
	return keys
}
