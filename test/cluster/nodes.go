package cluster

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotation of the simulated nodes.
const (
	// KwokNodeAnnotation=fake marks a Node as simulated, kwok's convention. (kwokctl's binary
	// runtime starts the kwok controller with --manage-all-nodes, so it simulates every Node.)
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// NodeTypeLabel is type=kwok on every node the harness creates.
	NodeTypeLabel = "type"
	// NodeTypeKwok is the value of NodeTypeLabel.
	NodeTypeKwok = "kwok"
)

// NodeName is the name of the i-th node (from 0) the harness creates.
func NodeName(i int) string { return fmt.Sprintf("kwok-node-%d", i) }

// AddNodes creates n more simulated nodes, with the given extra labels and capacity (see
// Options.NodeCapacity for the defaults), waits until all of them are Ready, and returns their
// names. The nodes have no taints, so every Pod can land on them; the kwok controller makes the
// Pods bound to them Running and Ready without running anything.
func (c *Cluster) AddNodes(ctx context.Context, n int, labels map[string]string, capacity corev1.ResourceList) ([]string, error) {
	c.nodesMu.Lock()
	first := c.nodes
	c.nodes += n
	c.nodesMu.Unlock()

	capacity = defaultNodeCapacity(capacity)
	names := make([]string, 0, n)
	for i := first; i < first+n; i++ {
		name := NodeName(i)
		nodeLabels := map[string]string{
			NodeTypeLabel:                   NodeTypeKwok,
			"kubernetes.io/hostname":        name,
			"kubernetes.io/os":              "linux",
			"kubernetes.io/arch":            "amd64",
			"kubernetes.io/role":            "agent",
			"node-role.kubernetes.io/agent": "",
		}
		maps.Copy(nodeLabels, labels)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: nodeLabels,
				Annotations: map[string]string{
					KwokNodeAnnotation:             "fake",
					"node.alpha.kubernetes.io/ttl": "0",
				},
			},
			Status: corev1.NodeStatus{
				Capacity:    capacity.DeepCopy(),
				Allocatable: capacity.DeepCopy(),
				NodeInfo: corev1.NodeSystemInfo{
					Architecture:    "amd64",
					OperatingSystem: "linux",
				},
			},
		}
		if _, err := c.clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("cluster: creating node %s: %w", name, err)
		}
		names = append(names, name)
	}
	if err := c.WaitNodesReady(ctx, names...); err != nil {
		return nil, err
	}
	return names, nil
}

// WaitNodesReady waits until the named nodes have the condition Ready=True.
func (c *Cluster) WaitNodesReady(ctx context.Context, names ...string) error {
	err := Poll(ctx, nodesTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			node, err := c.clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !NodeReady(node) {
				return false, fmt.Errorf("node %s is not Ready yet", name)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("cluster: waiting for nodes to be Ready: %w", err)
	}
	return nil
}

// NodeReady says whether a node has the condition Ready=True.
func NodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
