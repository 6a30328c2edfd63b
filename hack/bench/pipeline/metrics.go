package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// sample is one line of the Prometheus text format: a metric name, its labels and its value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseSamples reads the samples of the named metrics from a Prometheus text exposition. It only
// handles what client-go and the apiserver print: no timestamps are needed, exemplars are absent.
func parseSamples(r io.Reader, names ...string) ([]sample, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		nameEnd := strings.IndexAny(line, "{ ")
		if nameEnd < 0 || !want[line[:nameEnd]] {
			continue
		}
		s := sample{name: line[:nameEnd], labels: map[string]string{}}
		rest := line[nameEnd:]
		if rest[0] == '{' {
			var err error
			if rest, err = parseLabels(rest[1:], s.labels); err != nil {
				return nil, fmt.Errorf("%q: %w", line, err)
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("%q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseLabels parses `a="x",b="y"}` into labels and returns what follows the closing brace.
func parseLabels(s string, labels map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return "", fmt.Errorf("bad label list")
		}
		key := s[:eq]
		s = s[eq+2:]
		var val strings.Builder
		i := 0
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i == len(s) {
			return "", fmt.Errorf("unterminated label value")
		}
		labels[key] = val.String()
		s = s[i+1:]
	}
}

// operatorCounters are what the benchmark reads from the operator's metrics endpoint.
type operatorCounters struct {
	// requests is rest_client_requests_total summed by HTTP method: every request its client-go
	// clients sent, Events included.
	requests map[string]float64
	// reconciles is controller_runtime_reconcile_total by controller, and reconcileSeconds
	// controller_runtime_reconcile_time_seconds_sum by controller.
	reconciles, reconcileSeconds map[string]float64
}

func (c operatorCounters) minus(before operatorCounters) operatorCounters {
	return operatorCounters{
		requests:         diff(before.requests, c.requests),
		reconciles:       diff(before.reconciles, c.reconciles),
		reconcileSeconds: diff(before.reconcileSeconds, c.reconcileSeconds),
	}
}

// scrapeOperator reads the operator's metrics endpoint.
func scrapeOperator(ctx context.Context, addr string) (operatorCounters, error) {
	out := operatorCounters{requests: map[string]float64{}, reconciles: map[string]float64{}, reconcileSeconds: map[string]float64{}}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return out, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, fmt.Errorf("scrape the operator: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("scrape the operator: %s", resp.Status)
	}
	samples, err := parseSamples(resp.Body, "rest_client_requests_total", "controller_runtime_reconcile_total", "controller_runtime_reconcile_time_seconds_sum")
	if err != nil {
		return out, err
	}
	for _, s := range samples {
		switch s.name {
		case "rest_client_requests_total":
			out.requests[s.labels["method"]] += s.value
		case "controller_runtime_reconcile_total":
			out.reconciles[s.labels["controller"]] += s.value
		case "controller_runtime_reconcile_time_seconds_sum":
			out.reconcileSeconds[s.labels["controller"]] += s.value
		}
	}
	return out, nil
}

// apiKey names a group of apiserver requests: a verb on a resource (and subresource); the verb
// carries the response code when the apiserver refused the write ("POST 409").
type apiKey struct {
	verb, resource string
}

// apiserverWrites reads the apiserver's own metrics once and returns the mutating requests by verb
// and resource, and, apart, the reads (GET, LIST, WATCH: watch requests opened) by verb and
// resource and the watch events it sent by resource ("WATCH EVENTS") with their bytes ("WATCH
// BYTES"), from every client.
func apiserverWrites(ctx context.Context, cs kubernetes.Interface) (writes, reads map[apiKey]float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("scrape the apiserver: %w", err)
	}
	samples, err := parseSamples(strings.NewReader(string(body)), "apiserver_request_total", "apiserver_watch_events_total", "apiserver_watch_events_sizes_sum")
	if err != nil {
		return nil, nil, err
	}
	writes = writesByResource(samples)
	reads = map[apiKey]float64{}
	for _, s := range samples {
		res := s.labels["resource"]
		if res == "" {
			res = s.labels["kind"]
		}
		switch s.name {
		case "apiserver_watch_events_total":
			reads[apiKey{verb: "WATCH EVENTS", resource: res}] += s.value
			continue
		case "apiserver_watch_events_sizes_sum":
			reads[apiKey{verb: "WATCH BYTES", resource: res}] += s.value
			continue
		}
		if sub := s.labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		switch s.labels["verb"] {
		case "GET", "LIST", "WATCH":
			reads[apiKey{verb: s.labels["verb"], resource: res}] += s.value
		}
	}
	return writes, reads, nil
}

// writesByResource sums the mutating requests of apiserver_request_total samples by verb and
// resource. A write the apiserver refused (code 4xx or 5xx: a 409 Conflict or AlreadyExists, a
// 429) is kept apart, its code beside its verb, so the races a contender runs into show.
func writesByResource(samples []sample) map[apiKey]float64 {
	out := map[apiKey]float64{}
	for _, s := range samples {
		if s.name != "" && s.name != "apiserver_request_total" {
			continue
		}
		verb := s.labels["verb"]
		switch verb {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		default:
			continue
		}
		if code := s.labels["code"]; len(code) == 3 && (code[0] == '4' || code[0] == '5') {
			verb += " " + code
		}
		res := s.labels["resource"]
		if sub := s.labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		out[apiKey{verb: verb, resource: res}] += s.value
	}
	return out
}
