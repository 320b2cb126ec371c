// Package objstore stages a job's inputs from object storage (S3 and
// servers that speak its protocol, through minio-go) into its working
// directory, and sends its outputs back.
//
//	c, err := objstore.New(objstore.CredentialsFrom(secrets))
//	st, err := c.Download(ctx, loc, dir)   // every object under loc, as files under dir
//	st, err = c.Upload(ctx, dir, loc)      // every regular file under dir, as objects under loc
//
// Object keys become paths under dir only when they stay inside it: a key
// with an empty, "." or ".." element, a backslash or NUL is refused, and
// every file is written through an os.Root on dir. Errors name the
// location and what the server said ("Access Denied", "The specified
// bucket does not exist"). A Client holds no goroutine of its own: each
// call's work ends before it returns.
package objstore
