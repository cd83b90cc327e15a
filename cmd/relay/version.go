package main

import (
	"fmt"
	"io"

	"github.com/hookrelay/relay/internal/buildinfo"
	"github.com/hookrelay/relay/internal/envflag"
)

// version prints relay's version, commit and Go version on one line.
func version(args []string, stdout io.Writer) error {
	if err := envflag.New("relay version").Parse(args); err != nil {
		return err
	}
	_, err := fmt.Fprintln(stdout, buildinfo.Read())
	return err
}
