package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/store"
)

// The .lua files hold the script bodies; the shebang line that declares a
// script's flags to Redis 7 is prepended here, so each script has one source.
var (
	//go:embed apply.lua
	applyBody string
	//go:embed read.lua
	readBody string
)

// Shebang lines. A growing batch has no flags: a Redis at maxmemory with
// noeviction refuses it before it starts, so it never writes in part. A
// settling batch may run on a full Redis so that acknowledgements can free
// memory.
// Scans only read; no-writes already implies allow-oom, which is spelled
// out because a full Redis must still answer them.
const (
	applyShebang       = "#!lua\n"
	applySettleShebang = "#!lua flags=allow-oom\n"
	readShebang        = "#!lua flags=no-writes,allow-oom\n"
)

type script struct {
	src string
	sha string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// run calls the script by its digest. NOSCRIPT means it did not run (the
// cache was flushed, or a failover promoted a replica without it), so it is
// sent once more in full, which also caches it on that node again.
func (sc *script) run(ctx context.Context, c redis.Scripter, keys []string, args ...any) (any, error) {
	res, err := c.EvalSha(ctx, sc.sha, keys, args...).Result()
	if isNoScript(err) {
		res, err = c.Eval(ctx, sc.src, keys, args...).Result()
	}
	return res, err
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

type scripts struct {
	shebang bool
	apply   *script // growing batches
	settle  *script // Batch.Settles: allow-oom
	read    *script
}

func (sc *scripts) applyFor(b store.Batch) *script {
	if b.Settles {
		return sc.settle
	}
	return sc.apply
}

func (sc *scripts) all() []*script {
	return []*script{sc.apply, sc.settle, sc.read}
}

// ensure loads on node c every script it does not hold.
func (sc *scripts) ensure(ctx context.Context, c *redis.Client) error {
	all := sc.all()
	shas := make([]string, len(all))
	for i, s := range all {
		shas[i] = s.sha
	}
	held, err := c.ScriptExists(ctx, shas...).Result()
	if err != nil {
		return err
	}
	for i, ok := range held {
		if !ok {
			if err := c.ScriptLoad(ctx, all[i].src).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadScripts loads every script on every master (go-redis fans SCRIPT LOAD
// out on a ClusterClient), so pipelined EVALSHAs find them. A server that
// cannot compile a "#!lua" line (Redis before 7, miniredis) gets the bodies
// alone.
func loadScripts(ctx context.Context, c redis.UniversalClient) (*scripts, error) {
	with := &scripts{
		shebang: true,
		apply:   newScript(applyShebang + applyBody),
		settle:  newScript(applySettleShebang + applyBody),
		read:    newScript(readShebang + readBody),
	}
	err := with.load(ctx, c)
	if err == nil {
		return with, nil
	}
	if !isCompileError(err) {
		return nil, err
	}
	plain := newScript(applyBody)
	without := &scripts{shebang: false, apply: plain, settle: plain, read: newScript(readBody)}
	if err := without.load(ctx, c); err != nil {
		return nil, err
	}
	return without, nil
}

func (sc *scripts) load(ctx context.Context, c redis.UniversalClient) error {
	for _, s := range sc.all() {
		if err := c.ScriptLoad(ctx, s.src).Err(); err != nil {
			return fmt.Errorf("redisstore: load script: %w", err)
		}
	}
	return nil
}

func isCompileError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Error compiling script")
}
