package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Binaries are the executables a cluster needs in its BinDir.
var Binaries = []string{
	"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "kwokctl",
}

// Timeouts of the steps of Start. They are generous: the machine may be busy compiling.
const (
	createTimeout    = 3 * time.Minute
	healthyTimeout   = 2 * time.Minute
	nodesTimeout     = 2 * time.Minute
	deleteTimeout    = time.Minute
	processesTimeout = 15 * time.Second
)

// Options configure Start. The zero value is valid: a cluster named conveyor-<suffix> with no nodes.
type Options struct {
	// Name prefixes the cluster's name; a unique suffix is added. Defaults to "conveyor".
	Name string

	// BinDir holds the binaries. Defaults to $CONVEYOR_BIN, else <module root>/bin.
	BinDir string

	// Nodes is the number of simulated (kwok) nodes created, and waited for to be Ready, by Start.
	Nodes int

	// NodeCapacity is the capacity and allocatable of every node. Missing resources default to
	// cpu 64, memory 256Gi, pods 250.
	NodeCapacity corev1.ResourceList

	// NodeLabels are added to the labels every node gets (type=kwok, kubernetes.io/hostname, ...).
	NodeLabels map[string]string

	// DisableQPSLimits passes --disable-qps-limits to kwokctl: no inflight limits in the apiserver,
	// no client-side rate limits in the controller manager and scheduler.
	DisableQPSLimits bool

	// ExtraArgs are appended to the `kwokctl create cluster` command line, e.g.
	// "--extra-args=kube-apiserver=v=4" or "--kube-feature-gates=Foo=true". Do not --enable an
	// optional component (prometheus, metrics-server, ...): kwokctl would try to download it.
	ExtraArgs []string

	// Logf, when set, receives progress messages. Defaults to discarding them.
	Logf func(format string, args ...any)
}

// Cluster is a running local cluster. Its methods are safe for concurrent use.
type Cluster struct {
	name       string // kwokctl's cluster name (kwokctl itself calls it kwok-<name>)
	binDir     string
	workdir    string // KWOK_WORKDIR: everything of the cluster lives under it
	clusterDir string // <workdir>/clusters/<name>, kwokctl's directory of the cluster
	kubeconfig string
	env        []string // environment of kwokctl and kubectl
	logf       func(format string, args ...any)
	opts       Options

	restConfig *rest.Config
	client     client.Client
	clientset  kubernetes.Interface

	watchdog *watchdog

	nodesMu sync.Mutex
	nodes   int // nodes created so far, for numbering

	stopOnce sync.Once
	stopErr  error
}

// Scheme returns a new scheme with the client-go types, the CRD types and both conveyor API groups.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		appsv1alpha1.AddToScheme,
		schedulingv1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// Start creates a cluster and waits until its apiserver is healthy, the controller manager works
// and opts.Nodes simulated nodes are Ready. On failure it prints the tail of every component log
// through opts.Logf, copies the logs to $CONVEYOR_ARTIFACTS when set, and removes everything it
// created.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	started := time.Now()
	if opts.Name == "" {
		opts.Name = "conveyor"
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = DefaultBinDir(); err != nil {
			return nil, err
		}
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return nil, err
	}
	if err := CheckBinaries(binDir); err != nil {
		return nil, err
	}
	if opts.Nodes < 0 {
		return nil, fmt.Errorf("cluster: Options.Nodes is %d", opts.Nodes)
	}

	name := sanitizeName(opts.Name) + "-" + randomSuffix()
	workdir, err := os.MkdirTemp("", "conveyor-kwok-"+name+"-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		name:       name,
		binDir:     binDir,
		workdir:    workdir,
		clusterDir: filepath.Join(workdir, "clusters", name),
		kubeconfig: filepath.Join(workdir, "kubeconfig"),
		logf:       opts.Logf,
		opts:       opts,
	}
	c.env = c.environ()
	defer func() {
		if err != nil {
			// The cluster's directory goes with it: show why it did not start first.
			var tails strings.Builder
			c.DumpLogs(&tails)
			c.logf("%s", strings.TrimRight(tails.String(), "\n"))
			saveArtifacts(c)
			if stopErr := c.Stop(); stopErr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up the partly created cluster: %w", stopErr))
			}
		}
	}()

	// Armed before the first process starts, so nothing can outlive this process unnoticed.
	if c.watchdog, err = startWatchdog(workdir); err != nil {
		return nil, err
	}

	if err := c.create(ctx); err != nil {
		return nil, err
	}
	c.logf("cluster %s: control plane started after %s", c.name, time.Since(started).Round(time.Millisecond))

	if c.restConfig, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		return nil, fmt.Errorf("cluster: reading the kubeconfig kwokctl wrote: %w", err)
	}
	c.restConfig.QPS, c.restConfig.Burst = 200, 400
	if c.clientset, err = kubernetes.NewForConfig(c.restConfig); err != nil {
		return nil, err
	}
	if c.client, err = client.New(c.restConfig, client.Options{Scheme: Scheme()}); err != nil {
		return nil, err
	}

	if err := c.waitHealthy(ctx); err != nil {
		return nil, err
	}
	c.logf("cluster %s: healthy after %s", c.name, time.Since(started).Round(time.Millisecond))

	if opts.Nodes > 0 {
		if _, err := c.AddNodes(ctx, opts.Nodes, opts.NodeLabels, opts.NodeCapacity); err != nil {
			return nil, err
		}
		c.logf("cluster %s: %d nodes Ready after %s", c.name, opts.Nodes, time.Since(started).Round(time.Millisecond))
	}
	return c, nil
}

// kwokctlConfig is kwokctl's configuration file, $KWOK_WORKDIR/kwok.yaml, which it reads by
// default. It holds what has no flag of `kwokctl create cluster`: the etcd peer port, the address
// to bind (loopback only), and the tools kwokctl would otherwise download on demand (kubectl to
// probe the apiserver; etcdctl, etcdutl and kectl only for snapshots, which the harness does not
// take: pointing them at ./bin makes kwokctl fail instead of downloading).
//
// kube-controller-manager and kube-scheduler run without leader election: each is alone in its
// cluster, and with election on, a lease renewal that times out on a loaded machine makes the
// component exit (kwokctl does not restart it). That once stopped a benchmark's EndpointSlice
// controller for good at load average 30, leaving thousands of Services without endpoints.
const kwokctlConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  etcdPeerPort: %d
  kubectlBinary: %q
  etcdctlBinary: %q
  etcdutlBinary: %q
  kectlBinary: %q
componentsPatches:
- name: kube-controller-manager
  extraArgs:
  - key: leader-elect
    value: "false"
- name: kube-scheduler
  extraArgs:
  - key: leader-elect
    value: "false"
`

// create runs `kwokctl create cluster`.
func (c *Cluster) create(ctx context.Context) error {
	bin := func(name string) string { return filepath.Join(c.binDir, name) }

	// kwokctl picks ports by counting down from 32767 and probing each, and only avoids the ports
	// of clusters in the same KWOK_WORKDIR: clusters started at the same time in different work
	// directories all get the same ports. The kernel's choice, with all six held at once, is unique.
	ports, err := freePorts(6)
	if err != nil {
		return fmt.Errorf("cluster: choosing ports: %w", err)
	}
	config := fmt.Sprintf(kwokctlConfig, ports[0], bin("kubectl"), bin("etcdctl"), bin("etcdutl"), bin("kectl"))
	if err := os.WriteFile(filepath.Join(c.workdir, "kwok.yaml"), []byte(config), 0o644); err != nil {
		return err
	}

	args := []string{
		"--name", c.name,
		"create", "cluster",
		"--runtime", "binary",
		"--etcd-binary", bin("etcd"),
		"--kube-apiserver-binary", bin("kube-apiserver"),
		"--kube-controller-manager-binary", bin("kube-controller-manager"),
		"--kube-scheduler-binary", bin("kube-scheduler"),
		"--kwok-controller-binary", bin("kwok"),
		"--etcd-port", strconv.Itoa(ports[1]),
		"--kube-apiserver-port", strconv.Itoa(ports[2]),
		"--kube-controller-manager-port", strconv.Itoa(ports[3]),
		"--kube-scheduler-port", strconv.Itoa(ports[4]),
		"--controller-port", strconv.Itoa(ports[5]),
		"--kubeconfig", c.kubeconfig,
		"--timeout", createTimeout.String(),
	}
	if c.opts.DisableQPSLimits {
		args = append(args, "--disable-qps-limits")
	}
	args = append(args, c.opts.ExtraArgs...)

	ctx, cancel := context.WithTimeout(ctx, createTimeout+30*time.Second)
	defer cancel()
	if err := c.kwokctl(ctx, args...); err != nil {
		return fmt.Errorf("cluster: kwokctl create cluster: %w", err)
	}
	if _, err := os.Stat(c.kubeconfig); err != nil {
		return fmt.Errorf("cluster: kwokctl wrote no kubeconfig: %w", err)
	}
	return nil
}

// kwokctl runs kwokctl, appending its output to <workdir>/kwokctl.log.
func (c *Cluster) kwokctl(ctx context.Context, args ...string) error {
	logFile, err := os.OpenFile(c.kwokctlLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logFile.Close() }()
	_, _ = fmt.Fprintf(logFile, "\n$ kwokctl %s\n", strings.Join(args, " "))

	var tail tailBuffer
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "kwokctl"), args...)
	cmd.Env = c.env
	cmd.Dir = c.workdir
	cmd.Stdout = logFile
	cmd.Stderr = io.MultiWriter(logFile, &tail)
	// kwokctl dies with this process; the components it forks detach themselves (setsid) and are
	// handled by Stop and the watchdog.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, lastLines(tail.Bytes(), 30))
	}
	return nil
}

// environ is the environment of kwokctl and kubectl: the process's own without any KWOK_ or
// KUBECONFIG setting, plus the cluster's private work directory, kubeconfig and tools.
func (c *Cluster) environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "KWOK_") || k == "KUBECONFIG" || k == "KUBECACHEDIR" || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"KWOK_WORKDIR="+c.workdir,
		"KWOK_RUNTIME=binary",
		// kwokctl runs kubectl to check the apiserver; it takes the first kubectl on PATH, else
		// kubectlBinary, which it would download if it were a URL. Both point at ours.
		"KWOK_KUBECTL_BINARY="+filepath.Join(c.binDir, "kubectl"),
		"PATH="+c.binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+c.kubeconfig,
		"KUBECACHEDIR="+filepath.Join(c.workdir, "kubectl-cache"),
	)
}

func (c *Cluster) kwokctlLog() string { return filepath.Join(c.workdir, "kwokctl.log") }

// waitHealthy waits until the apiserver is ready and the controller manager has created the
// default ServiceAccount, which shows that it runs and can write.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	err := Poll(ctx, healthyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		body, err := c.clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			// The body lists every check; keep the failing ones.
			var failing []string
			for line := range strings.Lines(string(body)) {
				if strings.HasPrefix(line, "[-]") {
					failing = append(failing, strings.TrimSpace(line))
				}
			}
			if len(failing) > 0 {
				return false, fmt.Errorf("/readyz: %s", strings.Join(failing, ", "))
			}
			return false, fmt.Errorf("/readyz: %w", err)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("cluster: the apiserver did not become ready: %w", err)
	}
	err = Poll(ctx, healthyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := c.clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("the ServiceAccount default/default does not exist yet")
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("cluster: the controller manager did not start working: %w", err)
	}
	return nil
}

// Name is the cluster's unique name.
func (c *Cluster) Name() string { return c.name }

// Workdir is the cluster's private directory (kwokctl's KWOK_WORKDIR).
func (c *Cluster) Workdir() string { return c.workdir }

// BinDir is the directory the cluster's binaries come from.
func (c *Cluster) BinDir() string { return c.binDir }

// Kubeconfig is the path of the cluster's private kubeconfig; it authenticates as cluster admin.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RESTConfig returns a copy of the cluster-admin REST config.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Client is a controller-runtime client with [Scheme].
func (c *Cluster) Client() client.Client { return c.client }

// Clientset is a client-go clientset.
func (c *Cluster) Clientset() kubernetes.Interface { return c.clientset }

// RepoRoot is the root of the module, the parent of the default BinDir.
func (c *Cluster) RepoRoot() string {
	root, err := RepoRoot()
	if err != nil {
		return filepath.Dir(c.binDir)
	}
	return root
}

// Kubectl runs bin/kubectl against the cluster and returns its standard output. The error carries
// the standard error.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "kubectl"), append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Detach makes the cluster outlive this process: the watchdog is disarmed and Stop does nothing.
// Delete it later with `KWOK_WORKDIR=<Workdir> kwokctl --name <Name> delete cluster` and remove
// the directory.
func (c *Cluster) Detach() {
	c.stopOnce.Do(func() {
		if c.watchdog != nil {
			c.watchdog.disarm()
		}
	})
}

// Stop deletes the cluster: `kwokctl delete cluster`, then it kills whatever process of the cluster
// is still alive and removes the cluster's directory. It is idempotent; later calls return the
// first call's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	// Read before kwokctl deletes them.
	pids := readPidFiles(c.clusterDir)

	if _, err := os.Stat(filepath.Join(c.clusterDir, "kwok.yaml")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
		err := c.kwokctl(ctx, "--name", c.name, "delete", "cluster", "--kubeconfig", c.kubeconfig)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("kwokctl delete cluster: %w", err))
		}
	}

	// Whatever is left: the recorded pids and any other process started from an executable in our
	// directory.
	exclude := map[int]bool{os.Getpid(): true}
	if c.watchdog != nil {
		exclude[c.watchdog.pid()] = true
	}
	if err := killProcesses(c.workdir, pids, exclude, processesTimeout); err != nil {
		errs = append(errs, err)
	}

	if c.watchdog != nil {
		c.watchdog.disarm()
	}
	if err := os.RemoveAll(c.workdir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DefaultBinDir is $CONVEYOR_BIN, else the bin directory at the root of the module.
func DefaultBinDir() (string, error) {
	if dir := os.Getenv("CONVEYOR_BIN"); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

const modulePath = "github.com/conveyor-dev/conveyor"

// RepoRoot walks up from the working directory to the directory whose go.mod declares the module
// github.com/conveyor-dev/conveyor.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && moduleLine.FindSubmatch(data) != nil && string(moduleLine.FindSubmatch(data)[1]) == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("cluster: no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

var moduleLine = regexp.MustCompile(`(?m)^module\s+(\S+)`)

// CheckBinaries returns an error naming every binary missing from binDir.
func CheckBinaries(binDir string) error {
	var missing []string
	for _, name := range Binaries {
		info, err := os.Stat(filepath.Join(binDir, name))
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("cluster: missing from %s: %s (run `make tools`, or set CONVEYOR_BIN)", binDir, strings.Join(missing, ", "))
	}
	return nil
}

var nameChars = regexp.MustCompile(`[^a-z0-9-]+`)

func sanitizeName(s string) string {
	s = strings.Trim(nameChars.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > 30 {
		s = strings.TrimRight(s[:30], "-")
	}
	if s == "" {
		s = "conveyor"
	}
	return s
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// defaultNodeCapacity fills in the resources opts.NodeCapacity leaves out.
func defaultNodeCapacity(capacity corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	for k, v := range capacity {
		out[k] = v.DeepCopy()
	}
	return out
}

// freePorts returns n distinct TCP ports that are free on every interface right now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
