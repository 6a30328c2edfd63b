// Package kubectlconveyor is the `kubectl conveyor` plugin: `get` prints the tables of a
// namespace, `describe pipeline` one pipeline's stage DAG and repair history, and `top classes` the
// use of each class's workers. It takes kubectl's connection flags (--kubeconfig, --context,
// --namespace, …) and output flags (-o wide|json|yaml|name|jsonpath=…) through k8s.io/cli-runtime;
// the rendering lives in pkg/inspect, which the demo shares.
package kubectlconveyor
