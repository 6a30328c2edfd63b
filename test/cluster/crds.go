package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const crdTimeout = time.Minute

// InstallCRDs creates or updates every object in the YAML files (*.yaml, *.yml, several documents
// each) of dir, in the order of the file names, and waits until every CustomResourceDefinition among
// them is Established.
func (c *Cluster) InstallCRDs(ctx context.Context, dir string) error {
	objs, err := ReadManifests(dir)
	if err != nil {
		return err
	}
	if len(objs) == 0 {
		return fmt.Errorf("cluster: no manifests in %s", dir)
	}
	var crds []string
	for _, obj := range objs {
		if err := c.CreateOrUpdate(ctx, obj); err != nil {
			return err
		}
		if obj.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, obj.GetName())
		}
	}
	return c.WaitCRDsEstablished(ctx, crds...)
}

// ReadManifests decodes every object of the YAML files of dir.
func ReadManifests(dir string) ([]*unstructured.Unstructured, error) {
	var files []string
	for _, pattern := range []string{"*.yaml", "*.yml"} {
		matches, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return nil, err
		}
		files = append(files, matches...)
	}
	sort.Strings(files)
	var objs []*unstructured.Unstructured
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := decoder.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("cluster: decoding %s: %w", file, err)
			}
			if len(obj.Object) == 0 { // an empty document
				continue
			}
			if obj.GetKind() == "" || obj.GetName() == "" {
				return nil, fmt.Errorf("cluster: %s holds an object without kind or name", file)
			}
			objs = append(objs, obj)
		}
	}
	return objs, nil
}

// CreateOrUpdate creates obj, or replaces the object of that name with it.
func (c *Cluster) CreateOrUpdate(ctx context.Context, obj *unstructured.Unstructured) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current := &unstructured.Unstructured{}
		current.SetGroupVersionKind(obj.GroupVersionKind())
		err := c.client.Get(ctx, client.ObjectKeyFromObject(obj), current)
		if apierrors.IsNotFound(err) {
			return c.client.Create(ctx, obj.DeepCopy())
		}
		if err != nil {
			return err
		}
		desired := obj.DeepCopy()
		desired.SetResourceVersion(current.GetResourceVersion())
		return c.client.Update(ctx, desired)
	})
	if err != nil {
		return fmt.Errorf("cluster: applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// WaitCRDsEstablished waits until the named CustomResourceDefinitions are Established, their
// names accepted, and the kinds of their served versions known to Client's REST mapper.
func (c *Cluster) WaitCRDsEstablished(ctx context.Context, names ...string) error {
	err := Poll(ctx, crdTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		var notYet []string
		for _, name := range names {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return false, err
			}
			if !CRDEstablished(crd) {
				notYet = append(notYet, name)
			}
		}
		if len(notYet) > 0 {
			return false, fmt.Errorf("not Established yet: %s", strings.Join(notYet, ", "))
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("cluster: waiting for CRDs: %w", err)
	}
	// Established does not mean that discovery lists the resources yet; the client's REST mapper
	// fails at once on a kind it cannot discover. Wait until it maps every served version.
	err = Poll(ctx, crdTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return false, err
			}
			gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
			for _, v := range crd.Spec.Versions {
				if !v.Served {
					continue
				}
				if _, err := c.client.RESTMapper().RESTMapping(gk, v.Name); err != nil {
					return false, fmt.Errorf("%s/%s is not discoverable yet: %w", gk, v.Name, err)
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("cluster: waiting for CRDs: %w", err)
	}
	return nil
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == t {
			return cond.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// CRDEstablished says whether a CustomResourceDefinition is Established and its names accepted.
func CRDEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	return crdCondition(crd, apiextensionsv1.Established) && crdCondition(crd, apiextensionsv1.NamesAccepted)
}
