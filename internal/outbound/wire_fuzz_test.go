package outbound

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// FuzzAnswerReading reads arbitrary bytes as an endpoint's answer: the
// reader never panics, keeps at most MaxExcerptBytes of a refusal, reads
// within its bounds, and keeps the connection only after an answer whose
// framing said where it ended.
func FuzzAnswerReading(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nno!\r\n0\r\nX: 1\r\n\r\n",
		"HTTP/1.1 503 Busy\r\nRetry-After: 5\r\n\r\nlater",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n1;ext=" + strings.Repeat("x", 5000) + "\r\na\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\n",
	} {
		f.Add([]byte(seed))
	}
	const maxBody = 1024
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &countingReader{r: bytes.NewReader(data)}
		br := bufio.NewReaderSize(src, 4096)
		budget := maxResponseHeaderSize
		var head answerHead
		var err error
		for n := 0; n <= max1xx; n++ {
			if head, err = readHead(br, &budget); err != nil || head.status >= 200 {
				break
			}
		}
		if err != nil {
			return
		}
		if head.status < 100 || head.status > 999 {
			t.Fatalf("status %d read", head.status)
		}
		if head.status < 200 {
			return
		}
		wc := &wireConn{br: br}
		var ans wireAnswer
		keep := wc.readBody(&ans, &head, maxBody) && head.keepAlive
		if len(ans.excerpt) > MaxExcerptBytes {
			t.Fatalf("excerpt of %d bytes", len(ans.excerpt))
		}
		if head.status >= 200 && head.status < 300 && ans.excerpt != nil {
			t.Fatal("a 2xx answer kept an excerpt")
		}
		if keep && head.length < 0 && !head.chunked && head.status != 204 && head.status != 304 {
			t.Fatal("kept a connection whose answer ended with it")
		}
		if keep && br.Buffered() != 0 {
			t.Fatal("kept a connection with bytes past the answer")
		}
		// Two header budgets (the head, a chunked trailer), the body cap,
		// the chunked reader's allowance for chunk overhead, and a buffer.
		if limit := 2*maxResponseHeaderSize + maxBody + 1 + 16<<10 + 2*maxBody + 4096; src.n > limit {
			t.Fatalf("read %d bytes of the answer, over %d", src.n, limit)
		}
	})
}

type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
