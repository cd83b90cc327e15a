package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/hookrelay/relay/internal/app"
	"github.com/hookrelay/relay/internal/bench"
	"github.com/hookrelay/relay/internal/gctarget"
)

func main() {
	// From debug up: serve logs from its --log-level, the rest from info.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Before any work, so the first requests are collected as the rest.
	gctarget.Apply()
	if err := run(context.Background(), os.Args[1:], log, os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "relay:", err)
		}
		os.Exit(2)
	}
}

// run dispatches a subcommand; with none, or only flags, relay serves.
// -version and --version, as the first argument, are relay version.
func run(ctx context.Context, args []string, log *slog.Logger, stdout io.Writer) error {
	cmd := "serve"
	switch {
	case len(args) > 0 && (args[0] == "-version" || args[0] == "--version"):
		cmd, args = "version", args[1:]
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, log, stdout)
	case "token":
		return token(args, stdout)
	case "keygen":
		return keygen(args, stdout)
	case "receive":
		return receive(ctx, args, stdout)
	case "bench":
		return bench.Main(ctx, args, slog.New(app.AtLeast(log.Handler(), slog.LevelInfo)), stdout)
	case "version":
		return version(args, stdout)
	}
	// The word is not quoted: "relay redis://:pass@host" puts a password
	// here.
	return errors.New("unknown command (known: serve, token, keygen, receive, bench, version; with none, or only flags, relay serves)")
}
