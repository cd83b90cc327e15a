package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/store"
)

// classify is how every Store call that reaches Redis reports its error, so
// that callers branch on store errors, not on go-redis ones:
//
//   - an error of ctx, or one that came because ctx ended (go-redis reports a
//     deadline reached mid-reply as an i/o timeout), matches ctx's error and
//     nothing more: the caller handles its own cancellation;
//   - Redis at maxmemory (OOM) matches ErrOutOfMemory and store.ErrUnavailable;
//   - Redis away or not serving for now matches store.ErrUnavailable: the
//     connection refused, reset or timed out, the client's pool exhausted or
//     closed, and the replies LOADING, READONLY (a failover demoted the node),
//     MASTERDOWN, CLUSTERDOWN, TRYAGAIN, BUSY (a script runs) and max clients;
//   - anything else (a bad reply, a script error, NOAUTH) is returned as is.
//
// The cause stays in the chain for the logs.
func classify(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, store.ErrUnavailable):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	case isOOM(err):
		return fmt.Errorf("%w: %w: %w", store.ErrUnavailable, ErrOutOfMemory, err)
	case isTransient(err):
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// isOOM: Redis refused a command at maxmemory with noeviction. A script
// without a shebang (Redis before 7) gets it from its first write, wrapped
// in the script's error.
func isOOM(err error) bool {
	return redis.IsOOMError(err) || redis.HasErrorPrefix(err, "OOM") ||
		strings.Contains(err.Error(), "OOM command not allowed")
}

// isTransient: Redis is away, or answers but will not serve this command
// for now; the same command may succeed in a moment.
func isTransient(err error) bool {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr), // refused, reset, i/o timeout, DNS
		errors.Is(err, net.ErrClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return true
	}
	return redis.IsLoadingError(err) ||
		redis.IsReadOnlyError(err) ||
		redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) ||
		redis.IsMaxClientsError(err) ||
		redis.HasErrorPrefix(err, "BUSY ")
}
