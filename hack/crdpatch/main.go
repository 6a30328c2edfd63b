// Command crdpatch finishes the WorkerSet CRD after controller-gen: it bounds the embedded
// volumeClaimTemplate fields that the CEL transition rules compare (so the apiserver's cost
// estimate fits its budget), and drops the upstream field descriptions of the embedded Pod template
// and claim templates, which would otherwise make up most of the CRD. Conveyor's own fields
// keep their descriptions, so `kubectl explain` stays useful where it matters.
//
// Usage: crdpatch <workerset CRD file>
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdpatch <workerset CRD file>")
		os.Exit(2)
	}
	if err := patchFile(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "crdpatch: %v\n", err)
		os.Exit(1)
	}
}

func patchFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	versions, _ := dig(crd, "spec", "versions").([]any)
	if len(versions) == 0 {
		return fmt.Errorf("%s: no versions", path)
	}
	for _, v := range versions {
		spec, ok := dig(v, "schema", "openAPIV3Schema", "properties", "spec", "properties").(map[string]any)
		if !ok {
			return fmt.Errorf("%s: no spec schema", path)
		}
		if err := patchSpec(spec); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}

// bounds are the limits added to a volumeClaimTemplate's schema, by path below the item.
var bounds = []struct {
	path  []string
	key   string
	value any
}{
	{[]string{"metadata", "name"}, "maxLength", 63}, // it names a Pod volume: a DNS label
	{[]string{"spec", "storageClassName"}, "maxLength", 253},
	{[]string{"spec", "volumeName"}, "maxLength", 253},
	{[]string{"spec", "volumeAttributesClassName"}, "maxLength", 253},
	{[]string{"spec", "volumeMode"}, "maxLength", 16},
	{[]string{"spec", "accessModes"}, "maxItems", 4},
	{[]string{"spec", "accessModes", "items"}, "maxLength", 32},
	{[]string{"spec", "resources", "requests"}, "maxProperties", 8},
	{[]string{"spec", "resources", "limits"}, "maxProperties", 8},
	{[]string{"spec", "resources", "requests", "additionalProperties"}, "maxLength", 64},
	{[]string{"spec", "resources", "limits", "additionalProperties"}, "maxLength", 64},
}

func patchSpec(spec map[string]any) error {
	template, ok := spec["template"].(map[string]any)
	if !ok {
		return fmt.Errorf("no spec.template schema")
	}
	stripDescriptions(template, true)
	items, ok := dig(spec, "volumeClaimTemplates", "items").(map[string]any)
	if !ok {
		return fmt.Errorf("no spec.volumeClaimTemplates.items schema")
	}
	stripDescriptions(items, true)
	for _, b := range bounds {
		node := items
		for _, p := range b.path {
			if p == "items" || p == "additionalProperties" {
				node, ok = node[p].(map[string]any)
			} else {
				node, ok = dig(node, "properties", p).(map[string]any)
			}
			if !ok {
				return fmt.Errorf("volumeClaimTemplates: no field %v", b.path)
			}
		}
		node[b.key] = b.value
	}
	return nil
}

// stripDescriptions removes every description below a schema node, keeping the node's own.
func stripDescriptions(node map[string]any, keepOwn bool) {
	if !keepOwn {
		delete(node, "description")
	}
	if props, ok := node["properties"].(map[string]any); ok {
		for _, p := range props {
			if m, ok := p.(map[string]any); ok {
				stripDescriptions(m, false)
			}
		}
	}
	for _, key := range []string{"items", "additionalProperties"} {
		if m, ok := node[key].(map[string]any); ok {
			stripDescriptions(m, false)
		}
	}
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}
