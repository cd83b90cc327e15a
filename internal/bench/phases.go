package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// benchRequest is one POST of outcomes first..first+n-1.
type benchRequest struct {
	first int
	n     int
}

// phaseRequests are a phase's requests, per outcomes to a request (1: one
// outcome alone, not a list), round-robin over the namespaces. Each is
// written as it is sent, from one outcome encoded before the clock starts
// with its reservation id spliced in: the bench process holds no phase's
// worth of request bytes. An in-process relay shares the bench's heap,
// and tens of MB of prepared requests there (none of them relay's) set
// the collector's pace and fill its cycles with fresh memory.
type phaseRequests struct {
	reqs      []benchRequest
	per       int
	heads     []string
	ridPrefix string
	// before and after are an outcome's JSON around its reservation id.
	before, after []byte
}

// requests plans a phase's n outcomes, per to a request, over nss.
func (b *bencher) requests(phase string, nss []string, n, per int) *phaseRequests {
	pr := &phaseRequests{per: per, heads: make([]string, len(nss)), ridPrefix: b.ridPrefix(phase)}
	for i, ns := range nss {
		pr.heads[i] = b.load.head("/v1/namespaces/" + ns + "/outcomes")
	}
	const marker = "rid-marker"
	one, err := json.Marshal(schema.Outcome{
		ReservationID:  marker,
		Repository:     "bench/relay",
		OccurredUnixMs: b.now,
		Aborted:        &schema.Aborted{Reason: "bench", Detail: b.detail},
	})
	if err != nil {
		panic(err) // plain structs always encode
	}
	at := bytes.Index(one, []byte(`"`+marker+`"`)) + 1
	pr.before, pr.after = one[:at], one[at+len(marker):]
	pr.reqs = make([]benchRequest, 0, (n+per-1)/per)
	for first := 0; first < n; first += per {
		pr.reqs = append(pr.reqs, benchRequest{first: first, n: min(per, n-first)})
	}
	return pr
}

// wire appends request i, head and body, to dst, using body as scratch;
// it returns both grown.
func (pr *phaseRequests) wire(dst, body []byte, i int) (wire, scratch []byte) {
	rq := pr.reqs[i]
	body = body[:0]
	if pr.per > 1 {
		body = append(body, `{"outcomes":[`...)
	}
	for k := range rq.n {
		if k > 0 {
			body = append(body, ',')
		}
		body = append(body, pr.before...)
		body = append(body, pr.ridPrefix...)
		body = strconv.AppendInt(body, int64(rq.first+k), 10)
		body = append(body, pr.after...)
	}
	if pr.per > 1 {
		body = append(body, "]}"...)
	}
	return appendRequest(dst[:0], pr.heads[i%len(pr.heads)], body), body
}

// outcomes counts the outcomes of every request.
func (pr *phaseRequests) outcomes() int {
	n := 0
	for _, rq := range pr.reqs {
		n += rq.n
	}
	return n
}

// ridPrefix starts every reservation id of a phase of this run.
func (b *bencher) ridPrefix(phase string) string { return b.run + "-" + phase + "-" }

func (b *bencher) rid(phase string, i int) string { return b.ridPrefix(phase) + strconv.Itoa(i) }

// errorCounts counts a phase's failed outcomes by cause.
type errorCounts struct {
	mu    sync.Mutex
	n     int
	kinds map[string]int
}

func (e *errorCounts) add(why string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kinds == nil {
		e.kinds = map[string]int{}
	}
	e.n += n
	e.kinds[why] += n
}

// acceptedMarker marks an accepted outcome in a 202's results, as
// relay's compact JSON writes it.
var acceptedMarker = []byte(`"status":"accepted"`)

// post sends one request on c and returns how many of its outcomes were
// accepted; every other one is counted in errs under its cause.
func (b *bencher) post(ctx context.Context, c *loadConn, wire []byte, n int, errs *errorCounts) int {
	code, answer, err := c.do(ctx, wire)
	if err != nil {
		errs.add("transport: "+err.Error(), n)
		return 0
	}
	if code != http.StatusAccepted {
		var problem struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(answer, &problem)
		errs.add(strings.TrimSpace(fmt.Sprintf("HTTP %d %s", code, strings.TrimPrefix(problem.Type, httpapi.ProblemTypePrefix))), n)
		return 0
	}
	if bytes.Count(answer, acceptedMarker) == n {
		return n
	}
	var results struct {
		Results []struct {
			Status string `json:"status"`
		} `json:"results"`
	}
	if err := json.Unmarshal(answer, &results); err != nil || len(results.Results) != n {
		errs.add("202 with an unreadable answer", n)
		return 0
	}
	accepted := 0
	for _, r := range results.Results {
		if r.Status == "accepted" {
			accepted++
		} else {
			errs.add("202 with status "+r.Status, 1)
		}
	}
	return accepted
}

// send writes request i of pr on c and posts it, as post does.
func (b *bencher) send(ctx context.Context, c *loadConn, pr *phaseRequests, i int, errs *errorCounts) int {
	c.wire, c.scratch = pr.wire(c.wire, c.scratch, i)
	return b.post(ctx, c, c.wire, pr.reqs[i].n, errs)
}

// ingest posts the requests with -concurrency workers; nothing is
// delivered.
func (b *bencher) ingest(ctx context.Context, name string, pr *phaseRequests) (phaseResult, error) {
	reqs := pr.reqs
	var errs errorCounts
	var next, accepted atomic.Int64
	// Memory is read outside the commands' span: its reads are many.
	bytesBefore := b.keyBytes(ctx)
	before, cpuBefore := b.commands(ctx), b.cpu(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range b.conns {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(reqs) {
					return
				}
				if ctx.Err() != nil {
					errs.add("not sent: "+ctx.Err().Error(), reqs[i].n)
					continue
				}
				accepted.Add(int64(b.send(ctx, c, pr, i, &errs)))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	p := b.result(name, pr, &errs, elapsed)
	p.Rate = float64(accepted.Load()) / elapsed.Seconds()
	p.Commands = perOutcome(before, b.commands(ctx), int(accepted.Load()))
	cpuPerOutcome(&p, cpuBefore, b.cpu(ctx), int(accepted.Load()))
	p.Bytes = perOutcome(bytesBefore, b.keyBytes(ctx), int(accepted.Load()))
	return p, nil
}

// endToEnd posts lists while the backlog of accepted, undelivered
// outcomes leaves room under -window, and waits until every accepted one
// has arrived at each of the fan endpoints of its namespace. An outcome is
// undelivered until its last webhook arrived: the window holds -window
// outcomes' webhooks.
func (b *bencher) endToEnd(ctx context.Context, name string, pr *phaseRequests, fan int) (phaseResult, error) {
	reqs := pr.reqs
	tr := newDeliveryTracker(pr.ridPrefix, b.cfg.window*fan, b.cfg.perRequest*fan, fan)
	b.recv.track(tr)
	defer b.recv.track(nil)
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(pctx, tr.wakeAll)()

	var errs errorCounts
	var next, sent atomic.Int64
	before, cpuBefore := b.commands(ctx), b.cpu(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range b.conns {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(reqs) || !tr.reserve(pctx, reqs[i].n) {
					return
				}
				sent.Add(int64(reqs[i].n))
				acc := b.send(pctx, c, pr, i, &errs)
				tr.answered(acc, reqs[i].n-acc)
			}
		})
	}
	go func() {
		wg.Wait()
		tr.sendsDone()
	}()
	stalled := tr.wait(pctx, benchStall)
	cancel(stalled)
	wg.Wait()
	if unsent := pr.outcomes() - int(sent.Load()); unsent > 0 {
		errs.add("not sent: "+context.Cause(pctx).Error(), unsent)
	}
	got := tr.counts()
	elapsed := got.last.Sub(start)
	if got.delivered == 0 {
		elapsed = time.Since(start)
	}
	p := b.result(name, pr, &errs, elapsed)
	p.Delivered, p.BacklogPeak = got.delivered, got.peak
	p.Rate = float64(got.delivered) / float64(fan) / elapsed.Seconds()
	p.WebhookRate = float64(got.delivered) / elapsed.Seconds()
	p.Commands = perOutcome(before, b.commands(ctx), got.accepted/fan)
	cpuPerOutcome(&p, cpuBefore, b.cpu(ctx), got.delivered/fan)
	if stalled != nil {
		p.Stalled = stalled.Error()
	}
	return p, nil
}

// latency sends single outcomes on an open-loop schedule, outcome i at
// start + i/rate, each on its own goroutine and on whichever connection is
// free. A send that finds -concurrency requests in flight waits, and the
// schedule does not slow for it: the sends behind it go as soon as they
// can, and the lag is reported.
func (b *bencher) latency(ctx context.Context, name string, pr *phaseRequests) (phaseResult, error) {
	reqs := pr.reqs
	tr := newDeliveryTracker(pr.ridPrefix, 0, 0, 1)
	b.recv.track(tr)
	defer b.recv.track(nil)

	var errs errorCounts
	acceptedAt := make([]time.Time, len(reqs)) // each written by its own send
	free := make(chan *loadConn, len(b.conns))
	for _, c := range b.conns {
		free <- c
	}
	period := max(time.Second/time.Duration(b.cfg.rate), time.Millisecond)
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	var wg sync.WaitGroup
	var lag time.Duration
	before, cpuBefore := b.commands(ctx), b.cpu(ctx)
	start := time.Now()
	next := 0
send:
	for next < len(reqs) {
		due := min(int(time.Since(start).Seconds()*float64(b.cfg.rate))+1, len(reqs))
		for ; next < due; next++ {
			var c *loadConn
			select {
			case c = <-free:
			case <-ctx.Done():
				break send
			}
			scheduled := start.Add(time.Duration(float64(next) / float64(b.cfg.rate) * float64(time.Second)))
			lag = max(lag, time.Since(scheduled))
			i := next
			wg.Go(func() {
				defer func() { free <- c }()
				acc := b.send(ctx, c, pr, i, &errs)
				if acc == 1 {
					acceptedAt[reqs[i].first] = time.Now()
				}
				tr.answered(acc, 1-acc)
			})
		}
		if next == len(reqs) {
			break
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			break send
		}
	}
	if unsent := len(reqs) - next; unsent > 0 {
		errs.add("not sent: "+ctx.Err().Error(), unsent)
	}
	wg.Wait()
	sendTime := time.Since(start)
	tr.sendsDone()
	stalled := tr.wait(ctx, benchStall)
	got := tr.counts()

	var lat []time.Duration
	for i := range reqs {
		if acceptedAt[i].IsZero() {
			continue
		}
		if got, ok := b.recv.firstSeen(b.rid(name, i)); ok {
			lat = append(lat, max(got.Sub(acceptedAt[i]), 0))
		}
	}
	slices.Sort(lat)
	p := b.result(name, pr, &errs, sendTime)
	p.Delivered, p.WebhookRate = got.delivered, float64(got.delivered)/sendTime.Seconds()
	p.Rate = float64(got.accepted) / sendTime.Seconds()
	p.Commands = perOutcome(before, b.commands(ctx), got.accepted)
	cpuPerOutcome(&p, cpuBefore, b.cpu(ctx), got.delivered)
	p.HasLatency, p.SendLag = true, lag
	if len(lat) > 0 {
		p.P50, p.P99, p.Max = percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	}
	if stalled != nil {
		p.Stalled = stalled.Error()
	}
	return p, nil
}

// result fills what every phase reports alike.
func (b *bencher) result(name string, pr *phaseRequests, errs *errorCounts, elapsed time.Duration) phaseResult {
	n := pr.outcomes()
	errs.mu.Lock()
	defer errs.mu.Unlock()
	return phaseResult{
		Name: name, Outcomes: n, Errors: errs.n, ErrorKinds: maps.Clone(errs.kinds),
		Delivered: -1, BacklogPeak: -1, Commands: -1, Bytes: -1, WebhookRate: -1, SelfCPU: -1, RelayCPU: -1, RedisCPU: -1, Elapsed: elapsed,
	}
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// commands is the Redis command count now; -1 when unknown.
func (b *bencher) commands(ctx context.Context) int64 {
	if b.counter == nil {
		return -1
	}
	n, err := redisCommands(ctx, b.counter)
	if err != nil {
		return -1
	}
	return n
}

// keyBytes is the memory the in-process relay's keys take in Redis now:
// MEMORY USAGE, every element counted (SAMPLES 0), summed over the keys
// under its prefix. -1 when unknown: on the embedded miniredis, which has
// no MEMORY USAGE, and with -target, whose prefix the bench does not know.
//
// Not INFO memory's used_memory: that is the whole server's, moved by
// every other client of a shared Redis, by client buffers and by the
// allocator, while the keys under the prefix are this run's alone. The
// cost is a SCAN of them and a command per key, which is why the bench
// reads it outside the span its command counts cover.
func (b *bencher) keyBytes(ctx context.Context) int64 {
	if b.counter == nil || b.prefix == "" {
		return -1
	}
	n, err := redisKeyBytes(ctx, b.counter, b.prefix)
	if err != nil {
		return -1
	}
	return n
}

// redisKeyBytes sums MEMORY USAGE over the keys under prefix, on every
// master of a Cluster.
func redisKeyBytes(ctx context.Context, client redis.UniversalClient, prefix string) (int64, error) {
	read := func(ctx context.Context, c *redis.Client) (int64, error) {
		var total int64
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		flush := func() error {
			if len(keys) == 0 {
				return nil
			}
			cmds, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				for _, k := range keys {
					pipe.MemoryUsage(ctx, k, 0)
				}
				return nil
			})
			keys = keys[:0]
			if err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("MEMORY USAGE: %w", err)
			}
			for _, cmd := range cmds {
				// A key gone since the scan (nil) takes nothing.
				n, _ := cmd.(*redis.IntCmd).Result()
				total += n
			}
			return nil
		}
		for iter.Next(ctx) {
			if keys = append(keys, iter.Val()); len(keys) == 500 {
				if err := flush(); err != nil {
					return 0, err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return 0, fmt.Errorf("SCAN: %w", err)
		}
		if err := flush(); err != nil {
			return 0, err
		}
		return total, nil
	}
	return sumMasters(ctx, client, read)
}

func perOutcome(before, after int64, outcomes int) float64 {
	if before < 0 || after < 0 || outcomes <= 0 {
		return -1
	}
	return float64(after-before) / float64(outcomes)
}

// redisCommands sums calls= over INFO commandstats, which counts the
// commands scripts issue too. On a Cluster it sums the masters: a replica
// counts again the writes it copies, which relay did not send.
func redisCommands(ctx context.Context, client redis.UniversalClient) (int64, error) {
	read := func(ctx context.Context, c *redis.Client) (int64, error) {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats: %w", err)
		}
		var total int64
		for line := range strings.SplitSeq(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_") {
				continue
			}
			_, rest, _ := strings.Cut(line, ":calls=")
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO commandstats: unreadable line %q", line)
			}
			total += v
		}
		return total, nil
	}
	return sumMasters(ctx, client, read)
}

// sumMasters sums read over a Cluster's masters, or reads a lone Redis.
func sumMasters[T int64 | time.Duration](ctx context.Context, client redis.UniversalClient, read func(context.Context, *redis.Client) (T, error)) (T, error) {
	switch c := client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		var total T
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			v, err := read(ctx, n)
			mu.Lock()
			defer mu.Unlock()
			total += v
			return err
		})
		return total, err
	case *redis.Client:
		return read(ctx, c)
	}
	return 0, fmt.Errorf("cannot read INFO of a %T", client)
}

func redisKind(c redis.UniversalClient) string {
	if _, ok := c.(*redis.ClusterClient); ok {
		return "cluster"
	}
	return "redis"
}
