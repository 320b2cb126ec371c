package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/gpumesh/gpumesh/market"
)

// ErrNoCredentials is returned by New without an access key and secret.
var ErrNoCredentials = errors.New("no object storage credentials: give the secrets " +
	market.SecretAccessKeyID + " and " + market.SecretSecretAccessKey + " (gpumesh submit --secret)")

// Credentials are what a client needs to reach the storage.
type Credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
	// Region is the buckets' region; "" lets the client ask.
	Region string
	// Endpoint is the server's URL, "https://s3.amazonaws.com" when empty.
	Endpoint string
}

// CredentialsFrom reads the credentials from a job's secrets, named as
// AWS tools name them (market.SecretAccessKeyID and the rest).
func CredentialsFrom(secrets map[string]string) Credentials {
	return Credentials{
		AccessKeyID:     secrets[market.SecretAccessKeyID],
		SecretAccessKey: secrets[market.SecretSecretAccessKey],
		SessionToken:    secrets[market.SecretSessionToken],
		Region:          secrets[market.SecretRegion],
		Endpoint:        secrets[market.SecretEndpointURL],
	}
}

// Client reads and writes one storage service. It is safe for concurrent
// use; Close lets its idle connections go.
type Client struct {
	mc       *minio.Client
	endpoint string
	idle     interface{ CloseIdleConnections() }
}

// Close closes the client's idle connections (those of a transport New
// made; a transport given to New is the caller's).
func (c *Client) Close() {
	if c.idle != nil {
		c.idle.CloseIdleConnections()
	}
}

// New makes a client: ErrNoCredentials without an access key or secret,
// an error naming the endpoint for one that is not an http(s) URL.
// transport nil: one of its own, which Close closes.
func New(c Credentials, transport http.RoundTripper) (*Client, error) {
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return nil, ErrNoCredentials
	}
	endpoint := c.Endpoint
	if endpoint == "" {
		endpoint = "https://s3.amazonaws.com"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("%s %q: want the server's URL, such as https://minio.example.com:9000", market.SecretEndpointURL, endpoint)
	}
	var idle interface{ CloseIdleConnections() }
	if transport == nil {
		tr, err := minio.DefaultTransport(u.Scheme == "https")
		if err != nil {
			return nil, err
		}
		transport, idle = tr, tr
	}
	mc, err := minio.New(u.Host, &minio.Options{
		Creds:      credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		Secure:     u.Scheme == "https",
		Region:     c.Region,
		Transport:  transport,
		MaxRetries: 3,
	})
	if err != nil {
		return nil, fmt.Errorf("object storage at %s: %w", u.Host, err)
	}
	return &Client{mc: mc, endpoint: u.Host, idle: idle}, nil
}

// Stats counts what a Download or Upload moved.
type Stats struct {
	Objects int
	Bytes   int64
}

// Download writes every object under loc as a file under dir (made if
// missing), at the rest of its key after loc's prefix; a key that ends in
// "/" (a folder marker) makes a directory. It stops at the first error,
// which names the object; what it wrote stays.
func (c *Client) Download(ctx context.Context, loc market.S3Location, dir string) (Stats, error) {
	var st Stats
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return st, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, err
	}
	defer root.Close()
	for obj := range c.mc.ListObjectsIter(ctx, loc.Bucket, minio.ListObjectsOptions{Prefix: loc.Prefix, Recursive: true}) {
		if obj.Err != nil {
			return st, c.fail("listing", loc.String(), obj.Err)
		}
		rel := strings.TrimPrefix(obj.Key, loc.Prefix)
		if rel == "" {
			continue // the prefix's own folder marker
		}
		name, isDir, err := keyPath(rel)
		if err != nil {
			return st, fmt.Errorf("s3://%s/%s: %w", loc.Bucket, obj.Key, err)
		}
		if isDir {
			if err := root.MkdirAll(name, 0o755); err != nil {
				return st, err
			}
			continue
		}
		n, err := c.get(ctx, root, loc.Bucket, obj.Key, name)
		if err != nil {
			return st, err
		}
		st.Objects++
		st.Bytes += n
	}
	return st, nil
}

// get copies one object to the file name under root.
func (c *Client) get(ctx context.Context, root *os.Root, bucket, key, name string) (int64, error) {
	if d := path.Dir(name); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	obj, err := c.mc.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return 0, c.fail("reading", "s3://"+bucket+"/"+key, err)
	}
	defer obj.Close()
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, obj)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, c.fail("reading", "s3://"+bucket+"/"+key, err)
	}
	return n, nil
}

// keyPath turns the rest of an object's key into a path under the
// download's directory.
func keyPath(rel string) (name string, isDir bool, err error) {
	isDir = strings.HasSuffix(rel, "/")
	name = strings.TrimSuffix(rel, "/")
	if strings.ContainsAny(name, "\\\x00") || strings.HasPrefix(name, "/") {
		return "", false, errors.New("a key with a backslash, NUL or leading slash cannot be a file's name")
	}
	for _, el := range strings.Split(name, "/") {
		if el == "" || el == "." || el == ".." {
			return "", false, errors.New(`a key with an empty, "." or ".." element cannot be a file's name`)
		}
	}
	return name, isDir, nil
}

// Upload sends every regular file under src (a directory, or one file) to
// loc, each at loc's prefix and its path under src (a file alone at the
// prefix and its name). Links, devices and the like are left out (they
// are counted in skipped). It stops at the first error, which names the
// object.
func (c *Client) Upload(ctx context.Context, src string, loc market.S3Location) (st Stats, skipped int, err error) {
	fi, err := os.Stat(src)
	if err != nil {
		return st, 0, err
	}
	if fi.Mode().IsRegular() {
		n, err := c.put(ctx, os.DirFS(filepath.Dir(src)), filepath.Base(src), loc.Bucket, loc.Prefix+filepath.Base(src))
		if err != nil {
			return st, 0, err
		}
		return Stats{Objects: 1, Bytes: n}, 0, nil
	}
	root, err := os.OpenRoot(src)
	if err != nil {
		return st, 0, err
	}
	defer root.Close()
	fsys := root.FS()
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			skipped++
			return nil
		}
		n, err := c.put(ctx, fsys, p, loc.Bucket, loc.Prefix+p)
		if err != nil {
			return err
		}
		st.Objects++
		st.Bytes += n
		return nil
	})
	return st, skipped, err
}

// put sends the file p of fsys as the object key.
func (c *Client) put(ctx context.Context, fsys fs.FS, p, bucket, key string) (int64, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	info, err := c.mc.PutObject(ctx, bucket, key, f, fi.Size(), minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return 0, c.fail("writing", "s3://"+bucket+"/"+key, err)
	}
	return info.Size, nil
}

// fail says what went wrong with an object or location, in the server's
// words when it answered.
func (c *Client) fail(doing, what string, err error) error {
	if er := minio.ToErrorResponse(err); er.Code != "" {
		msg := er.Message
		if msg == "" {
			msg = er.Code
		}
		return fmt.Errorf("%s %s at %s: %s (%s)", doing, what, c.endpoint, msg, er.Code)
	}
	return fmt.Errorf("%s %s at %s: %w", doing, what, c.endpoint, err)
}
