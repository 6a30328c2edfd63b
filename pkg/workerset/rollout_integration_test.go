package workerset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// setImage changes the set's template image: a new revision.
func setImage(t *testing.T, ns, name, image string) {
	t.Helper()
	set := getSet(t, ns, name)
	patch := client.MergeFrom(set.DeepCopy())
	set.Spec.Template.Spec.Containers[0].Image = image
	if err := envK8s.Patch(context.Background(), set, patch); err != nil {
		t.Fatalf("set image: %v", err)
	}
}

// kubelet plays the kubelet for a test: every Pod of the namespace whose image is not "bad" is
// marked Running and Ready. It runs until the test ends.
func kubelet(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods := &corev1.PodList{}
			if err := envK8s.List(ctx, pods, client.InNamespace(ns)); err == nil {
				for i := range pods.Items {
					pod := &pods.Items[i]
					if pod.DeletionTimestamp != nil || workerpod.RunningAndReady(pod) || pod.Spec.Containers[0].Image == "bad" {
						continue
					}
					pod.Status.Phase = corev1.PodRunning
					pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
					_ = envK8s.Status().Update(ctx, pod)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func podImages(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, pod := range listPods(t, ns) {
		out[name] = pod.Spec.Containers[0].Image
	}
	return out
}

func wantImages(t *testing.T, ns string, want map[string]string) {
	t.Helper()
	eventually(t, fmt.Sprintf("images %v", want), func() error {
		got := podImages(t, ns)
		for name, pod := range listPods(t, ns) {
			if !workerpod.RunningAndReady(pod) && want[name] != "bad" {
				return fmt.Errorf("%s not ready; images %v", name, got)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("images %v", got)
		}
		return nil
	})
}

func revisions(t *testing.T, ns string) []appsv1.ControllerRevision {
	t.Helper()
	list := &appsv1.ControllerRevisionList{}
	if err := envK8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b appsv1.ControllerRevision) int { return int(a.Revision - b.Revision) })
	return list.Items
}

func TestIntegrationRevisionsRollbackAndHistory(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	kubelet(t, ns)
	set := newSet("r").Replicas(2).Obj()
	set.Spec.RevisionHistoryLimit = ptr.To[int32](2)
	createSet(t, ns, set)
	wantImages(t, ns, map[string]string{"r-0": "worker:1", "r-1": "worker:1"})
	first := getSet(t, ns, "r").Status.UpdateRevision

	for _, image := range []string{"worker:2", "worker:3", "worker:4", "worker:5"} {
		setImage(t, ns, "r", image)
		wantImages(t, ns, map[string]string{"r-0": image, "r-1": image})
	}
	eventually(t, "history truncated to 2 old revisions plus the current one", func() error {
		if n := len(revisions(t, ns)); n != 3 {
			return fmt.Errorf("%d revisions", n)
		}
		return nil
	})

	// Roll back to worker:4: its revision still exists and is reused, renumbered as the newest.
	before := revisions(t, ns)
	setImage(t, ns, "r", "worker:4")
	wantImages(t, ns, map[string]string{"r-0": "worker:4", "r-1": "worker:4"})
	after := revisions(t, ns)
	if len(after) != len(before) {
		t.Fatalf("rollback created a revision: %d before, %d after", len(before), len(after))
	}
	newest := after[len(after)-1]
	// The status is written after the Pods change: wait for it.
	var st appsv1alpha1.WorkerSetStatus
	eventually(t, "status names the newest revision as current and update", func() error {
		st = getSet(t, ns, "r").Status
		if newest.Labels[appsv1alpha1.RevisionLabel] != st.UpdateRevision || st.CurrentRevision != st.UpdateRevision {
			return fmt.Errorf("newest revision %s (%d), status current %s update %s", newest.Name, newest.Revision, st.CurrentRevision, st.UpdateRevision)
		}
		return nil
	})
	if st.UpdateRevision == first {
		t.Fatalf("update revision still the first one")
	}
}

func TestIntegrationRollingUpdatePartition(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	kubelet(t, ns)
	createSet(t, ns, newSet("p").Replicas(4).Partition(2).MaxUnavailable(intstr.FromInt32(1)).Obj())
	wantImages(t, ns, map[string]string{"p-0": "worker:1", "p-1": "worker:1", "p-2": "worker:1", "p-3": "worker:1"})
	setImage(t, ns, "p", "worker:2")
	wantImages(t, ns, map[string]string{"p-0": "worker:1", "p-1": "worker:1", "p-2": "worker:2", "p-3": "worker:2"})
	eventually(t, "status shows the paused rollout", func() error {
		st := getSet(t, ns, "p").Status
		if st.UpdatedReplicas != 2 || st.CurrentRevision == st.UpdateRevision {
			return fmt.Errorf("updated %d current %s update %s", st.UpdatedReplicas, st.CurrentRevision, st.UpdateRevision)
		}
		return nil
	})
	// A Pod below the partition that is deleted comes back at the current revision.
	if err := envK8s.Delete(context.Background(), listPods(t, ns)["p-0"]); err != nil {
		t.Fatal(err)
	}
	wantImages(t, ns, map[string]string{"p-0": "worker:1", "p-1": "worker:1", "p-2": "worker:2", "p-3": "worker:2"})
}

// TestIntegrationBrokenRolloutRecovery covers the rollout a StatefulSet waits on forever: a
// template whose Pods never become Ready, then the revert. The rollout must un-stick with no manual Pod deletion,
// under both Pod management policies and both update strategies.
func TestIntegrationBrokenRolloutRecovery(t *testing.T) {
	needEnv(t)
	for _, tc := range []struct {
		name string
		set  *appsv1alpha1.WorkerSet
	}{
		{"OrderedReady RollingUpdate", newSet("b").Replicas(3).PodManagementPolicy(appsv1alpha1.OrderedReadyPodManagement).Obj()},
		{"Parallel RollingUpdate", newSet("b").Replicas(3).Obj()},
		{"OrderedReady OnDelete", newSet("b").Replicas(3).PodManagementPolicy(appsv1alpha1.OrderedReadyPodManagement).OnDelete().Obj()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			kubelet(t, ns)
			createSet(t, ns, tc.set)
			good := map[string]string{"b-0": "worker:1", "b-1": "worker:1", "b-2": "worker:1"}
			wantImages(t, ns, good)

			setImage(t, ns, "b", "bad")
			if tc.set.Spec.UpdateStrategy.Type == appsv1alpha1.OnDeleteWorkerSetStrategyType {
				// OnDelete: the user deletes one Pod to try the new template.
				if err := envK8s.Delete(context.Background(), listPods(t, ns)["b-2"]); err != nil {
					t.Fatal(err)
				}
			}
			stuck := map[string]string{"b-0": "worker:1", "b-1": "worker:1", "b-2": "bad"}
			wantImages(t, ns, stuck)
			// It stays stuck: the broken Pod is never Ready, so nothing else is replaced.
			eventually(t, "status counts the broken Pod", func() error {
				if st := getSet(t, ns, "b").Status; st.UpdatedReplicas != 1 || st.ReadyReplicas != 2 {
					return fmt.Errorf("status %+v", st)
				}
				return nil
			})
			if got := podImages(t, ns); fmt.Sprint(got) != fmt.Sprint(stuck) {
				t.Fatalf("the broken rollout went on: %v", got)
			}

			// Revert: no manual deletion, and every Pod ends Ready on the good template.
			setImage(t, ns, "b", "worker:1")
			wantImages(t, ns, good)
			eventually(t, "rollout complete", func() error {
				st := getSet(t, ns, "b").Status
				if st.ReadyReplicas != 3 || st.UpdatedReplicas != 3 || st.CurrentRevision != st.UpdateRevision {
					return fmt.Errorf("status %+v", st)
				}
				return nil
			})
		})
	}
}

func TestIntegrationDrainBeforeScaleDown(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	kubelet(t, ns)
	set := newSet("d").Replicas(3).Obj()
	set.Spec.ScaleDown = &appsv1alpha1.WorkerSetScaleDown{DrainTimeoutSeconds: ptr.To[int32](3600)}
	createSet(t, ns, set)
	pods := wantPods(t, ns, "d-0", "d-1", "d-2")

	// A holder (the Pipeline controller, in real life) holds d-2.
	hold := func(name string, on bool) {
		pod := &corev1.Pod{}
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, pod); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(pod.DeepCopy())
		if on {
			pod.Labels[appsv1alpha1.PreDeleteLabelPrefix+"pipelines"] = "true"
		} else {
			delete(pod.Labels, appsv1alpha1.PreDeleteLabelPrefix+"pipelines")
		}
		if err := envK8s.Patch(context.Background(), pod, patch); err != nil {
			t.Fatal(err)
		}
	}
	hold("d-2", true)
	scaleSet(t, ns, "d", 2)
	eventually(t, "d-2 PreparingDelete and the set Draining", func() error {
		pod := listPods(t, ns)["d-2"]
		if pod == nil || pod.Labels[appsv1alpha1.LifecycleLabel] != appsv1alpha1.LifecyclePreparingDelete {
			return fmt.Errorf("d-2 %v", pod)
		}
		c := meta.FindStatusCondition(getSet(t, ns, "d").Status.Conditions, appsv1alpha1.WorkerSetProgressing)
		if c == nil || c.Reason != appsv1alpha1.ReasonDraining {
			return fmt.Errorf("progressing %+v", c)
		}
		return nil
	})
	if pod := listPods(t, ns)["d-2"]; pod.UID != pods["d-2"].UID || pod.DeletionTimestamp != nil {
		t.Fatalf("held Pod deleted")
	}

	// A scale-up during the drain keeps the Pod and cancels the drain.
	scaleSet(t, ns, "d", 3)
	eventually(t, "drain cancelled", func() error {
		pod := listPods(t, ns)["d-2"]
		if pod.Labels[appsv1alpha1.LifecycleLabel] != "" || pod.UID != pods["d-2"].UID {
			return fmt.Errorf("d-2 labels %v", pod.Labels)
		}
		return nil
	})

	// Scale down again and release the hold: the Pod goes.
	scaleSet(t, ns, "d", 2)
	eventually(t, "d-2 PreparingDelete again", func() error {
		if pod := listPods(t, ns)["d-2"]; pod.Labels[appsv1alpha1.LifecycleLabel] != appsv1alpha1.LifecyclePreparingDelete {
			return errors.New("not marked")
		}
		return nil
	})
	hold("d-2", false)
	wantPods(t, ns, "d-0", "d-1")
}

func TestIntegrationClaimResize(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	for _, c := range []struct {
		name   string
		expand bool
	}{{ns + "-expandable", true}, {ns + "-fixed", false}} {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: c.name}, Provisioner: "example.com/none", AllowVolumeExpansion: ptr.To(c.expand)}
		if err := envK8s.Create(context.Background(), sc); err != nil {
			t.Fatal(err)
		}
	}
	set := newSet("v").Replicas(2).VolumeClaim("data", "", "1Gi").VolumeClaim("logs", "", "1Gi").Obj()
	set.Spec.VolumeClaimTemplates[0].Spec.StorageClassName = ptr.To(ns + "-expandable")
	set.Spec.VolumeClaimTemplates[1].Spec.StorageClassName = ptr.To(ns + "-fixed")
	createSet(t, ns, set)
	wantPods(t, ns, "v-0", "v-1")
	// Play the volume binder: the apiserver lets only bound claims grow.
	eventually(t, "claims bound", func() error {
		for _, name := range []string{"data-v-0", "data-v-1", "logs-v-0", "logs-v-1"} {
			claim := &corev1.PersistentVolumeClaim{}
			if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, claim); err != nil {
				return err
			}
			if claim.Status.Phase == corev1.ClaimBound {
				continue
			}
			claim.Status.Phase = corev1.ClaimBound
			claim.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
			if err := envK8s.Status().Update(context.Background(), claim); err != nil {
				return err
			}
		}
		return nil
	})

	cur := getSet(t, ns, "v")
	patch := client.MergeFrom(cur.DeepCopy())
	for i := range cur.Spec.VolumeClaimTemplates {
		cur.Spec.VolumeClaimTemplates[i].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("5Gi")
	}
	if err := envK8s.Patch(context.Background(), cur, patch); err != nil {
		t.Fatalf("raise storage: %v", err)
	}
	eventually(t, "expandable claims patched, fixed ones reported", func() error {
		for _, name := range []string{"data-v-0", "data-v-1", "logs-v-0", "logs-v-1"} {
			claim := &corev1.PersistentVolumeClaim{}
			if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, claim); err != nil {
				return err
			}
			want := "1Gi"
			if name[:4] == "data" {
				want = "5Gi"
			}
			if got := claim.Spec.Resources.Requests.Storage().String(); got != want {
				return fmt.Errorf("%s requests %s, want %s", name, got, want)
			}
		}
		st := getSet(t, ns, "v").Status.VolumeClaimTemplates
		if len(st) != 2 || st[0].Name != "data" || st[0].Updated != 2 || st[0].Claims != 2 || st[1].NotExpandable != 2 || st[1].Updated != 0 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}
