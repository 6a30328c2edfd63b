package main

import (
	"strings"
	"testing"
)

// The apiserver's writes are summed by verb and resource over every code, except the writes it
// refused, which keep their code: the races a contender runs into are counted apart.
func TestWritesByResourceKeepsRefusedWritesApart(t *testing.T) {
	const scrape = `# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="scheduling.conveyor.dev",resource="pipelinebindings",scope="resource",subresource="",verb="POST",version="v1alpha1"} 3000
apiserver_request_total{code="409",component="apiserver",dry_run="",group="scheduling.conveyor.dev",resource="pipelinebindings",scope="resource",subresource="",verb="POST",version="v1alpha1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.conveyor.dev",resource="pipelines",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 2000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.conveyor.dev",resource="pipelines",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 5
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="",verb="GET",version="v1"} 90
`
	samples, err := parseSamples(strings.NewReader(scrape), "apiserver_request_total")
	if err != nil {
		t.Fatal(err)
	}
	got := writesByResource(samples)
	want := map[apiKey]float64{
		{verb: "POST", resource: "pipelinebindings"}:     3000,
		{verb: "POST 409", resource: "pipelinebindings"}: 12,
		{verb: "PATCH", resource: "pipelines/status"}:    2005,
		{verb: "POST 409", resource: "services"}:         7,
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s %s: got %v, want %v", k.verb, k.resource, got[k], v)
		}
	}
}
