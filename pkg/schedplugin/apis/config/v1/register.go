package v1

import (
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedulerconfigv1 "k8s.io/kube-scheduler/config/v1"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
)

// SchemeGroupVersion is kubescheduler.config.k8s.io/v1, the version of KubeSchedulerConfiguration
// the arguments are written in.
var SchemeGroupVersion = schema.GroupVersion{Group: kubeschedulerconfigv1.GroupName, Version: "v1"}

// AddToScheme registers the internal and the versioned arguments with a scheme, with their
// defaults and conversions.
func AddToScheme(s *runtime.Scheme) error {
	if err := config.AddToScheme(s); err != nil {
		return err
	}
	return addVersioned(s)
}

func addVersioned(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &WorkerClassCapacityArgs{})
	s.AddTypeDefaultingFunc(&WorkerClassCapacityArgs{}, func(obj any) {
		SetDefaults_WorkerClassCapacityArgs(obj.(*WorkerClassCapacityArgs))
	})
	if err := s.AddConversionFunc((*WorkerClassCapacityArgs)(nil), (*config.WorkerClassCapacityArgs)(nil), func(a, b any, scope conversion.Scope) error {
		return Convert_v1_WorkerClassCapacityArgs_To_config_WorkerClassCapacityArgs(a.(*WorkerClassCapacityArgs), b.(*config.WorkerClassCapacityArgs), scope)
	}); err != nil {
		return err
	}
	return s.AddConversionFunc((*config.WorkerClassCapacityArgs)(nil), (*WorkerClassCapacityArgs)(nil), func(a, b any, scope conversion.Scope) error {
		return Convert_config_WorkerClassCapacityArgs_To_v1_WorkerClassCapacityArgs(a.(*config.WorkerClassCapacityArgs), b.(*WorkerClassCapacityArgs), scope)
	})
}

// The kube-scheduler handles plugin arguments with two schemes:
//   - kubeschedulerscheme.Scheme decodes a KubeSchedulerConfiguration, the arguments of every
//     plugin included; it was built when its package was initialised, so the types are added to
//     it directly;
//   - a private scheme, built on first use from the scheme builders of the internal and v1
//     packages, defaults the arguments and converts them to the internal form that a plugin's
//     factory receives; the types are added to those builders, which is the only way into it.
//
// Without the second, the scheduler would reject the configuration ("no kind is registered") or
// hand the plugin undefaulted arguments. sigs.k8s.io/scheduler-plugins does the same.
func init() {
	kubeschedulerconfig.SchemeBuilder.Register(config.AddToScheme)
	kubeschedulerconfigv1.SchemeBuilder.Register(addVersioned)
	utilruntime.Must(AddToScheme(kubeschedulerscheme.Scheme))
}
