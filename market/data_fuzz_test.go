package market

import (
	"strings"
	"testing"
)

// FuzzParseS3URL: whatever the URL, ParseS3URL refuses it or returns a
// bucket S3 would take and a prefix of whole, plain elements ending in
// "/", which read back the same.
func FuzzParseS3URL(f *testing.F) {
	for _, s := range []string{"s3://bkt", "s3://bkt/a/b", "s3:///x", "s3://b/../x", "s3://a.b-c/p/", "gs://x", "s3://bkt//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseS3URL(s)
		if err != nil {
			return
		}
		if !bucketName.MatchString(l.Bucket) || (l.Prefix != "" && !strings.HasSuffix(l.Prefix, "/")) {
			t.Fatalf("ParseS3URL(%q) = %+v", s, l)
		}
		for _, el := range strings.Split(strings.TrimSuffix(l.Prefix, "/"), "/") {
			if l.Prefix != "" && (el == "" || el == "." || el == "..") {
				t.Fatalf("ParseS3URL(%q): prefix %q", s, l.Prefix)
			}
		}
		if again, err := ParseS3URL(l.String()); err != nil || again != l {
			t.Fatalf("%q reads back as %+v, %v", l.String(), again, err)
		}
	})
}

// FuzzWorkPath: a path WorkPath takes is "." or relative, without empty,
// "." or ".." elements.
func FuzzWorkPath(f *testing.F) {
	for _, s := range []string{"/data", "data/x", "..", "/", "a//b", "a/./b", "a\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rel, err := WorkPath(s)
		if err != nil || rel == "." {
			return
		}
		if strings.HasPrefix(rel, "/") || strings.ContainsAny(rel, "\\\x00") {
			t.Fatalf("WorkPath(%q) = %q", s, rel)
		}
		for _, el := range strings.Split(rel, "/") {
			if el == "" || el == "." || el == ".." {
				t.Fatalf("WorkPath(%q) = %q", s, rel)
			}
		}
	})
}
