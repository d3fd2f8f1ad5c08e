// Package replica copies checkpoints of a snapshot repository to a store
// that other servers read (an S3 bucket, a folder on a shared disk), and
// back.
//
// The Store interface is the five calls this needs of a store (Put, Get,
// Stat, List, Delete) over keys of one strict form, refused alike by every
// implementation (no "..", no hidden names): FolderStore (a folder, a Put
// being a temporary file fsync'ed and renamed) and S3Store (minio-go,
// NewS3's URL, the standard AWS credentials).
//
// # Errors
//
// Errors say the step and the key, prefixed "replica:". Callers branch
// with errors.Is on ErrNotFound (a key the store lacks) and ctx's errors;
// other errors (the network, a full disk) are worth a retry.
//
// # Goroutines
//
// Stores start none of their own but the HTTP client's connections.
package replica
