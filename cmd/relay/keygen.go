package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/hookrelay/relay/internal/envflag"
	"github.com/hookrelay/relay/internal/signing"
)

// keygen writes a new Ed25519 signing key as PEM, to a file created 0600 or
// to stdout. With -out it prints the key's public key list entry, to add to
// the published keys before relay signs with the key.
func keygen(args []string, stdout io.Writer) error {
	fs := envflag.New("relay keygen")
	out := fs.String("out", "", "file to create (0600); stdout when empty")
	keyID := fs.String("key-id", "relay-1", "key id to print the public key list entry for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key, err := signing.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	pub, err := signing.NewPublicKey(*keyID, key.Public().(ed25519.PublicKey))
	if err != nil {
		return err
	}
	pem, err := signing.EncodeKeyPEM(key)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(pem)
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if _, err := f.Write(pem); err != nil {
		f.Close()
		return fmt.Errorf("keygen: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	entry, err := json.Marshal(pub)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", entry)
	return err
}
