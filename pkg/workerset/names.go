package workerset

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// podName is the stable name of the Pod with the given ordinal: <set>-<ordinal>.
func podName(set *appsv1alpha1.WorkerSet, ordinal int) string {
	return fmt.Sprintf("%s-%d", set.Name, ordinal)
}

// claimName is the stable name of a Pod's claim from a volumeClaimTemplate:
// <template>-<set>-<ordinal>.
func claimName(template string, set *appsv1alpha1.WorkerSet, ordinal int) string {
	return fmt.Sprintf("%s-%s-%d", template, set.Name, ordinal)
}

// ordinalOf returns the ordinal in a Pod name of the set, or -1 if the name is not <set>-<n>.
func ordinalOf(set *appsv1alpha1.WorkerSet, name string) int {
	rest, ok := strings.CutPrefix(name, set.Name+"-")
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// selectorLabels are the labels every Pod of the set carries; the set's managed selector.
func selectorLabels(set *appsv1alpha1.WorkerSet) map[string]string {
	return map[string]string{appsv1alpha1.WorkerSetLabel: set.Name}
}

// templateHash is the revision name of a Pod template: a short, stable hash of its JSON form,
// salted with the collision count as upstream does. Equal templates hash equal, so a rollback to
// an earlier template returns to its revision.
func templateHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	b, err := json.Marshal(template)
	if err != nil {
		// A PodTemplateSpec always marshals; keep the hash well defined anyway.
		b = []byte(template.String())
	}
	_, _ = h.Write(b)
	if collisionCount != nil {
		_, _ = fmt.Fprintf(h, "/%d", *collisionCount)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}
