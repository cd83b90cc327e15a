// Package bench is relay bench: it drives load through relay's public API
// and prints one table.
//
// By default it builds a relay in this process, exactly as serve does, on a
// free loopback port; with -target it drives a running relay instead. Either
// way a loopback receiver takes the webhooks. The receiver does not verify
// signatures: the e2e tests verify both schemes, and here verification would
// take CPU from the relay under test on the same machine. In-process, relay
// logs warnings and errors only: its access log would bury the table.
//
// Phases, each on namespaces of its own with one endpoint each:
//
//	single   outcomes POSTed one per request, endpoints disabled so that
//	         nothing is delivered: ingest alone. Rate: accepted per second.
//	list     the same in lists of -per-request.
//	e2e      lists while fewer than -window outcomes are accepted and not
//	         yet delivered. Rate: -n over the time until the last of them
//	         first reached the receiver.
//	latency  single POSTs on an open-loop schedule of -rate per second;
//	         p50/p99/max of the time from the 202 to the webhook's first
//	         arrival. Rate: accepted per second of sending; send lag is the
//	         most any send left behind its schedule.
//
// With -endpoints 1,8,100,1000 the single, list and e2e phases run once
// per count E, each on -streams namespaces of E endpoints, one row per
// phase and count: outcomes per second, Redis commands and bytes per
// accepted outcome, and for e2e webhooks (outcomes × E) delivered per
// second. The ingest phases' endpoints are enabled, as healthy ones are,
// and run before the in-process driver starts, so nothing is delivered
// while they are measured; they are deleted once measured. Bytes are the
// growth of MEMORY USAGE summed over the run's key prefix, read before
// streams deliver, so ingest rows only. The in-process relay is built with
// the endpoint limit the largest count needs, up to
// outbox.HardMaxEndpoints; a count relay refuses is a row that says
// "refused: limit N". One receiver takes every endpoint's webhooks, each
// endpoint at a path of its own, and counts a webhook as a reservation id
// at a path.
//
// The phases POST through a lean HTTP/1.1 client (loadConn), -concurrency
// keep-alive connections, so that the load takes little of the CPU relay
// is measured on.
//
// Redis commands per outcome are the growth of INFO commandstats (scripts'
// own calls included) over the phase, divided by the outcomes accepted: they
// count every client of that Redis, so run on a quiet one.
//
// CPU per outcome is CPU time, user+sys, over the phase divided by the
// outcomes accepted (single, list) or delivered (e2e, latency), in three
// columns:
//
//	relay          the -target-pid process (/proc/<pid>/stat, 10 ms
//	               steps): relay alone. In-process it is "-": relay
//	               shares this process with the load generator and the
//	               receiver, and Go cannot tell one goroutine's CPU from
//	               another's; -cpuprofile's side labels split it.
//	bench process  this process (getrusage): relay, load generator and
//	               receiver together in-process; with -target, the load
//	               generator and receiver alone.
//	redis          used_cpu_user+used_cpu_sys of INFO cpu, the server
//	               process without its RDB/AOF forks, summed over a
//	               Cluster's masters like the commands; every client's, as
//	               they are. "-" for the embedded miniredis.
package bench
