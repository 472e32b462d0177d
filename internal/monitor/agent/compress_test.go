package agent

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                            false,
		"identity":                    false,
		"gzip":                        true,
		"GZIP":                        true,
		"deflate, gzip;q=0.5":         true,
		"gzip;q=0":                    false,
		"gzip; q=0.0, identity":       false,
		"*":                           true,
		"zstd,gzip":                   true,
		"x-gzip":                      false,
		"br;q=1.0, gzip;q=0.8, *;q=0": true,
	} {
		if got := acceptsGzip([]string{header}); got != want {
			t.Errorf("Accept-Encoding %q: gzip accepted %v, want %v", header, got, want)
		}
	}
}

func TestGzipFastCompressesOnlyWhenAsked(t *testing.T) {
	body := strings.Repeat("tessera_gpu_tenants{gpu_uuid=\"GPU-0\",node=\"a\"} 3\n", 200)
	srv := httptest.NewServer(gzipFast(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body))) // the plain length: wrong once compressed
		io.WriteString(w, body)
	})))
	defer srv.Close()
	get := func(encoding string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Accept-Encoding", encoding) // explicit: the transport does not unzip
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := get("gzip")
	if ce := resp.Header.Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", ce)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || string(got) != body {
		t.Fatalf("unzipped body differs (%d bytes, err %v), want %d bytes", len(got), err, len(body))
	}
	resp = get("identity")
	if ce := resp.Header.Get("Content-Encoding"); ce != "" {
		t.Fatalf("Content-Encoding %q for identity, want none", ce)
	}
	if got, _ := io.ReadAll(resp.Body); string(got) != body {
		t.Fatalf("plain body differs (%d bytes)", len(got))
	}
}
