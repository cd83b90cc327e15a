// Package digest computes BLAKE3 digests with reused hashers.
package digest
