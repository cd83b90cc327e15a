package helm

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const chartDir = "relay"

// kubeVersion is the cluster the chart is rendered for, as
// `helm template --kube-version` would say; the chart needs 1.30 or later.
var kubeVersion = &common.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}

// Values no manifest but a Secret may hold.
const (
	hookPEM       = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIHOOKKEYSECRETMATERIALxxxxxxxxxxxxxxxx\n-----END PRIVATE KEY-----\n"
	jwtSecret     = "jwt-secret-value-0123456789abcdefghij"
	redisPassword = "redis-password-value-s3cr3t"
)

// secretValues are those values, and as a Secret's data holds them.
var secretValues = []string{
	"HOOKKEYSECRETMATERIAL", jwtSecret, redisPassword,
	base64.StdEncoding.EncodeToString([]byte(hookPEM)),
	base64.StdEncoding.EncodeToString([]byte(jwtSecret)),
	base64.StdEncoding.EncodeToString([]byte(redisPassword)),
}

// minimal is what every install must set: relay's origin, its Redis, its
// signing key and how it verifies API tokens.
func minimal() map[string]any {
	return map[string]any{
		"relay": map[string]any{"publicURL": "https://relay.example.com"},
		"redis": map[string]any{
			"standalone": map[string]any{"host": "redis.data.svc"},
			"password":   map[string]any{"value": redisPassword},
		},
		"hookKey": map[string]any{"pem": hookPEM},
		"jwt":     map[string]any{"secret": map[string]any{"value": jwtSecret}},
	}
}

// merge sets src's leaves over dst's, recursively.
func merge(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// valueSet is one install of the chart and what its Deployment must say.
type valueSet struct {
	name   string
	values map[string]any
	// redisURL is RELAY_REDIS_URL as the pod spec holds it.
	redisURL string
	// secret names where the hook key, the JWT secret and the Redis
	// password are read ("" for none), and whether the chart makes one.
	hookSecret, jwtSecret, redisSecret string
	createsSecret                      bool
	// createsConfigMap: the chart makes a ConfigMap of public keys.
	createsConfigMap bool
	// env holds further variables the Deployment must set, to these values.
	env map[string]string
}

func valueSets() []valueSet {
	return []valueSet{
		{
			name:          "defaults",
			values:        minimal(),
			redisURL:      "redis://:$(REDIS_PASSWORD)@redis.data.svc:6379/0",
			hookSecret:    "relay",
			jwtSecret:     "relay",
			redisSecret:   "relay",
			createsSecret: true,
		},
		{
			name: "cluster",
			values: merge(minimal(), map[string]any{
				"redis": map[string]any{
					"mode":     "cluster",
					"password": map[string]any{"value": ""},
					"cluster":  map[string]any{"seeds": []any{"redis-0.redis:6379", "redis-1.redis:6379", "redis-2.redis:7000"}},
				},
				"relay": map[string]any{
					"allowCIDRs": []any{"10.1.2.3/32", "10.1.2.4/32"},
					"buckets":    24,
					"durability": "replicas=1",
					"delivery":   map[string]any{"concurrency": 128},
				},
				"networkPolicy": map[string]any{"enabled": true},
				"extraEnv":      []any{map[string]any{"name": "GOGC", "value": "200"}},
			}),
			redisURL:      "redis-0.redis:6379,redis-1.redis:6379,redis-2.redis:7000",
			hookSecret:    "relay",
			jwtSecret:     "relay",
			createsSecret: true,
			env: map[string]string{
				"RELAY_ALLOW_CIDRS":          "10.1.2.3/32,10.1.2.4/32",
				"RELAY_BUCKETS":              "24",
				"RELAY_DURABILITY":           "replicas=1",
				"RELAY_DELIVERY_CONCURRENCY": "128",
				"GOGC":                       "200",
			},
		},
		{
			name: "sentinel",
			values: merge(minimal(), map[string]any{
				"redis": map[string]any{
					"mode":     "sentinel",
					"tls":      true,
					"username": "relay",
					"sentinel": map[string]any{"sentinels": []any{"s-0.sentinel:26379", "s-1.sentinel:26380", "s-2.sentinel"}, "masterName": "outbox", "db": 2},
				},
				"networkPolicy": map[string]any{"enabled": true},
			}),
			redisURL:      "rediss+sentinel://relay:$(REDIS_PASSWORD)@s-0.sentinel:26379,s-1.sentinel:26380,s-2.sentinel/outbox/2",
			hookSecret:    "relay",
			jwtSecret:     "relay",
			redisSecret:   "relay",
			createsSecret: true,
		},
		{
			name: "existing-secrets",
			values: map[string]any{
				"relay": map[string]any{"publicURL": "https://relay.example.com"},
				"redis": map[string]any{
					"mode":     "cluster",
					"tls":      true,
					"cluster":  map[string]any{"seeds": []any{"c-0:6379", "c-1:6379"}},
					"password": map[string]any{"existingSecret": "redis-auth", "key": "password"},
				},
				"hookKey": map[string]any{"existingSecret": "relay-hook-key", "key": "signing.pem", "keyID": "relay-2"},
				"jwt":     map[string]any{"secret": map[string]any{"existingSecret": "relay-jwt"}},
				"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}}},
			},
			redisURL:    "rediss://:$(REDIS_PASSWORD)@c-0:6379?addr=c-1:6379",
			hookSecret:  "relay-hook-key",
			jwtSecret:   "relay-jwt",
			redisSecret: "redis-auth",
			env:         map[string]string{"RELAY_HOOK_KEY_ID": "relay-2", "RELAY_HOOK_KEY_FILE": "/etc/relay/hook-key/signing.pem"},
		},
		{
			// Not one of the Redis forms: EdDSA tokens and a key rotation's
			// published keys, files from the chart's ConfigMap.
			name: "public-keys",
			values: merge(minimal(), map[string]any{
				"jwt": map[string]any{
					"secret":     map[string]any{"value": ""},
					"publicKeys": map[string]any{"keys": map[string]any{"ops-2": "-----BEGIN PUBLIC KEY-----\nB\n-----END PUBLIC KEY-----\n", "ops-1": "-----BEGIN PUBLIC KEY-----\nA\n-----END PUBLIC KEY-----\n"}},
				},
				"hookKey": map[string]any{"publishedKeys": map[string]any{"json": `{"version":1,"keys":[]}`}},
			}),
			redisURL:         "redis://:$(REDIS_PASSWORD)@redis.data.svc:6379/0",
			hookSecret:       "relay",
			redisSecret:      "relay",
			createsSecret:    true,
			createsConfigMap: true,
			env: map[string]string{
				"RELAY_JWT_PUBLIC_KEYS": "ops-1=/etc/relay/jwt-public-keys/ops-1.pem,ops-2=/etc/relay/jwt-public-keys/ops-2.pem",
				"RELAY_PUBLISHED_KEYS":  "/etc/relay/published-keys/published-keys.json",
			},
		},
	}
}

// render installs the chart as `helm template` does, with no cluster.
func render(t *testing.T, values map[string]any) (*release.Release, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName = "relay"
	install.Namespace = "relay"
	install.KubeVersion = kubeVersion
	r, err := install.Run(chrt, values)
	if err != nil {
		return nil, err
	}
	rel, ok := r.(*release.Release)
	if !ok {
		t.Fatalf("release is a %T", r)
	}
	return rel, nil
}

// object is one rendered manifest: its kind, its JSON, and the typed
// object it decoded into (nil for a kind outside k8s.io/api).
type object struct {
	kind, name string
	json       []byte
	typed      any
}

// decode decodes every manifest of a release strictly: a field the
// Kubernetes type does not have is an error, as the API server's strict
// field validation would make it.
func decode(manifest string) ([]object, error) {
	var out []object
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("%w\n%s", err, doc)
		}
		if string(js) == "null" {
			continue
		}
		var meta struct {
			APIVersion, Kind string
			Metadata         struct{ Name string }
		}
		if err := json.Unmarshal(js, &meta); err != nil {
			return nil, err
		}
		var typed any
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 Deployment":
			typed = new(appsv1.Deployment)
		case "v1 Service":
			typed = new(corev1.Service)
		case "v1 Secret":
			typed = new(corev1.Secret)
		case "v1 ConfigMap":
			typed = new(corev1.ConfigMap)
		case "v1 ServiceAccount":
			typed = new(corev1.ServiceAccount)
		case "policy/v1 PodDisruptionBudget":
			typed = new(policyv1.PodDisruptionBudget)
		case "networking.k8s.io/v1 NetworkPolicy":
			typed = new(networkingv1.NetworkPolicy)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			// Not a k8s.io/api type: checked as plain YAML below.
		default:
			return nil, fmt.Errorf("%s %s %q: a kind this test does not know", meta.APIVersion, meta.Kind, meta.Metadata.Name)
		}
		if typed != nil {
			dec := json.NewDecoder(bytes.NewReader(js))
			dec.DisallowUnknownFields()
			if err := dec.Decode(typed); err != nil {
				return nil, fmt.Errorf("%s %q: %w", meta.Kind, meta.Metadata.Name, err)
			}
		}
		out = append(out, object{kind: meta.Kind, name: meta.Metadata.Name, json: js, typed: typed})
	}
}

func TestChartLints(t *testing.T) {
	for _, vs := range valueSets() {
		t.Run(vs.name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = "relay"
			lint.KubeVersion = kubeVersion
			res := lint.Run([]string{chartDir}, vs.values)
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
			if res.TotalChartsLinted != 1 {
				t.Errorf("linted %d charts, want 1", res.TotalChartsLinted)
			}
		})
	}
}

func TestChartRenders(t *testing.T) {
	for _, vs := range valueSets() {
		t.Run(vs.name, func(t *testing.T) {
			rel, err := render(t, vs.values)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			objs, err := decode(rel.Manifest)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			byKind := map[string]object{}
			for _, o := range objs {
				if _, dup := byKind[o.kind]; dup {
					t.Errorf("two objects of kind %s", o.kind)
				}
				byKind[o.kind] = o
			}
			want := []string{"Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"}
			if vs.createsSecret {
				want = append(want, "Secret")
			}
			if vs.createsConfigMap {
				want = append(want, "ConfigMap")
			}
			if np, _ := vs.values["networkPolicy"].(map[string]any); np["enabled"] == true {
				want = append(want, "NetworkPolicy")
			}
			if _, ok := vs.values["metrics"]; ok {
				want = append(want, "ServiceMonitor")
			}
			slices.Sort(want)
			if got := slices.Sorted(maps.Keys(byKind)); !slices.Equal(got, want) {
				t.Errorf("kinds %v, want %v", got, want)
			}

			dep := byKind["Deployment"].typed.(*appsv1.Deployment)
			checkPod(t, dep)
			checkEnv(t, vs, dep)
			checkSecretsStayInSecrets(t, objs)
			cm := ""
			if o, ok := byKind["ConfigMap"]; ok {
				cm = o.typed.(*corev1.ConfigMap).Name
			}
			checkFiles(t, dep, cm)
			checkService(t, byKind["Service"].typed.(*corev1.Service), dep)
			if o, ok := byKind["NetworkPolicy"]; ok {
				checkNetworkPolicy(t, vs, o.typed.(*networkingv1.NetworkPolicy))
			}
			if o, ok := byKind["ServiceMonitor"]; ok {
				checkServiceMonitor(t, o.json)
			}
			if s, ok := byKind["Secret"]; ok {
				name := s.typed.(*corev1.Secret).Name
				if dep.Spec.Template.Annotations["checksum/secret"] == "" {
					t.Errorf("Secret %s, but no checksum/secret annotation restarts relay when it changes", name)
				}
			}
			if !strings.Contains(rel.Info.Notes, "noeviction") {
				t.Errorf("NOTES do not say Redis needs maxmemory-policy noeviction:\n%s", rel.Info.Notes)
			}
		})
	}
}

func checkPod(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod: runAsNonRoot is not true")
	}
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("pod: no fixed non-root runAsUser")
	}
	if psc == nil || psc.FSGroup == nil {
		// Secret files are root's; without fsGroup user 65532 cannot read
		// the key file unless it is readable by all.
		t.Error("pod: no fsGroup to read the key file by")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod: seccomp profile is not RuntimeDefault")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("pod: the service account token is mounted; relay never calls the Kubernetes API")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("container: no securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("container: runAsNonRoot is not true")
	case sc.RunAsUser == nil || *sc.RunAsUser == 0:
		t.Error("container: no fixed non-root runAsUser")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("container: root filesystem is not read-only")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("container: privilege escalation is allowed")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0:
		t.Error("container: capabilities are not drop ALL, add none")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("container: seccomp profile is not RuntimeDefault")
	}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil || v.HostPath != nil {
			t.Errorf("volume %s: relay writes no file and needs no writable volume", v.Name)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %v: want cpu and memory requests and a memory limit", c.Resources)
	}

	port := ""
	for _, p := range c.Ports {
		if p.Name == "http" {
			port = p.Name
		}
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != port || port == "" {
			t.Errorf("%s probe %+v: want GET %s on the http port", name, p, path)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")

	// relay gives fires in flight 20 s after SIGTERM (internal/app Run);
	// the preStop sleep comes first, inside the same grace period.
	const drain = 20
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
		t.Fatalf("preStop %+v: want a sleep", c.Lifecycle)
	}
	sleep := c.Lifecycle.PreStop.Sleep.Seconds
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < sleep+drain {
		t.Errorf("terminationGracePeriodSeconds %v: want at least the preStop sleep %d + %d s", g, sleep, drain)
	}
	if s := dep.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable == nil || s.MaxUnavailable.IntValue() != 0 {
		t.Error("rolling update may take a process away before its successor is ready")
	}
	if len(pod.TopologySpreadConstraints) == 0 {
		t.Error("no topologySpreadConstraints")
	}
	for _, tsc := range pod.TopologySpreadConstraints {
		if tsc.LabelSelector == nil || !maps.Equal(tsc.LabelSelector.MatchLabels, dep.Spec.Selector.MatchLabels) {
			t.Errorf("topology spread on %s selects %v, not relay's pods", tsc.TopologyKey, tsc.LabelSelector)
		}
	}
}

func checkEnv(t *testing.T, vs valueSet, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	env := map[string]corev1.EnvVar{}
	var order []string
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e
		order = append(order, e.Name)
	}
	value := func(name string) string {
		e, ok := env[name]
		if !ok {
			t.Errorf("env %s is not set", name)
		}
		return e.Value
	}
	if got := value("RELAY_REDIS_URL"); got != vs.redisURL {
		t.Errorf("RELAY_REDIS_URL = %q, want %q", got, vs.redisURL)
	}
	if got := value("RELAY_PUBLIC_URL"); got != "https://relay.example.com" {
		t.Errorf("RELAY_PUBLIC_URL = %q", got)
	}
	if got := value("RELAY_LISTEN"); got != ":8080" {
		t.Errorf("RELAY_LISTEN = %q", got)
	}
	for name, want := range vs.env {
		if got := value(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	secretRef := func(name, secret string) {
		e, ok := env[name]
		switch {
		case secret == "" && ok:
			t.Errorf("env %s is set, with no secret to read it from", name)
		case secret == "":
		case !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil:
			t.Errorf("env %s is not read from a Secret: %+v", name, e)
		case e.ValueFrom.SecretKeyRef.Name != secret:
			t.Errorf("env %s is read from Secret %q, want %q", name, e.ValueFrom.SecretKeyRef.Name, secret)
		}
	}
	secretRef("RELAY_JWT_SECRET", vs.jwtSecret)
	secretRef("REDIS_PASSWORD", vs.redisSecret)
	if vs.redisSecret != "" {
		// $(REDIS_PASSWORD) is expanded only from a variable defined earlier.
		if slices.Index(order, "REDIS_PASSWORD") > slices.Index(order, "RELAY_REDIS_URL") {
			t.Error("REDIS_PASSWORD comes after RELAY_REDIS_URL, which names it")
		}
	} else if strings.Contains(vs.redisURL, "REDIS_PASSWORD") {
		t.Fatal("the test's URL names a password it does not give")
	}

	// The hook key is a file, mounted from its Secret, readable by its owner
	// (and the pod's fsGroup) only.
	keyFile := value("RELAY_HOOK_KEY_FILE")
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(keyFile, m.MountPath+"/") {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("RELAY_HOOK_KEY_FILE %s is on no read-only mount", keyFile)
	}
	for _, v := range pod.Volumes {
		if v.Name != mount.Name {
			continue
		}
		if v.Secret == nil || v.Secret.SecretName != vs.hookSecret {
			t.Errorf("hook key volume %+v: want Secret %q", v.VolumeSource, vs.hookSecret)
		} else if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077&^0o040 != 0 {
			t.Errorf("hook key file mode %v: readable by others", v.Secret.DefaultMode)
		} else if len(v.Secret.Items) != 1 || mount.MountPath+"/"+v.Secret.Items[0].Path != keyFile {
			t.Errorf("hook key items %+v do not put the key at %s", v.Secret.Items, keyFile)
		}
	}
}

// checkFiles fails when a file a variable names is on no volume: each path
// of RELAY_HOOK_KEY_FILE, RELAY_PUBLISHED_KEYS and RELAY_JWT_PUBLIC_KEYS
// must be an item of a Secret or ConfigMap volume mounted there, and a
// ConfigMap the chart made must be the one mounted.
func checkFiles(t *testing.T, dep *appsv1.Deployment, configMap string) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	files := map[string]string{} // path: where it comes from
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.Secret != nil:
				for _, it := range v.Secret.Items {
					files[m.MountPath+"/"+it.Path] = "Secret " + v.Secret.SecretName
				}
			case v.ConfigMap != nil:
				for _, it := range v.ConfigMap.Items {
					files[m.MountPath+"/"+it.Path] = "ConfigMap " + v.ConfigMap.Name
				}
			}
		}
	}
	var paths []string
	for _, e := range c.Env {
		switch e.Name {
		case "RELAY_HOOK_KEY_FILE", "RELAY_PUBLISHED_KEYS":
			paths = append(paths, e.Value)
		case "RELAY_JWT_PUBLIC_KEYS":
			for _, entry := range strings.Split(e.Value, ",") {
				_, path, _ := strings.Cut(entry, "=")
				paths = append(paths, path)
			}
		}
	}
	for _, path := range paths {
		from, ok := files[path]
		switch {
		case !ok:
			t.Errorf("%s is on no mounted volume", path)
		case strings.HasPrefix(from, "ConfigMap ") && configMap != "" && from != "ConfigMap "+configMap:
			t.Errorf("%s comes from %s, the chart made ConfigMap %s", path, from, configMap)
		}
	}
}

// checkSecretsStayInSecrets fails when a secret value appears anywhere but
// in a Secret: an env literal, a ConfigMap, an annotation.
func checkSecretsStayInSecrets(t *testing.T, objs []object) {
	t.Helper()
	for _, o := range objs {
		if o.kind == "Secret" {
			continue
		}
		for _, s := range secretValues {
			if bytes.Contains(o.json, []byte(s)) {
				t.Errorf("%s %s holds a secret value (%.8s...)", o.kind, o.name, s)
			}
		}
	}
}

func checkService(t *testing.T, svc *corev1.Service, dep *appsv1.Deployment) {
	t.Helper()
	if !maps.Equal(svc.Spec.Selector, dep.Spec.Selector.MatchLabels) {
		t.Errorf("Service selects %v, the Deployment's pods are %v", svc.Spec.Selector, dep.Spec.Selector.MatchLabels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("Service ports %+v: want one, to the http port", svc.Spec.Ports)
	}
}

func checkNetworkPolicy(t *testing.T, vs valueSet, np *networkingv1.NetworkPolicy) {
	t.Helper()
	ports := map[int]bool{}
	var blocks []networkingv1.IPBlock
	dns := false
	for _, rule := range np.Spec.Egress {
		for _, p := range rule.Ports {
			if p.Port.IntValue() == 53 {
				dns = true
			} else {
				ports[p.Port.IntValue()] = true
			}
		}
		for _, peer := range rule.To {
			if peer.IPBlock != nil {
				if len(rule.Ports) != 0 {
					t.Errorf("webhook egress %s limited to ports %v", peer.IPBlock.CIDR, rule.Ports)
				}
				blocks = append(blocks, *peer.IPBlock)
			}
		}
	}
	if !dns {
		t.Error("no DNS egress")
	}
	want := map[string][]int{"cluster": {6379, 7000}, "sentinel": {26379, 26380, 6379}}[vs.name]
	if got := slices.Sorted(maps.Keys(ports)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("Redis egress ports %v, want %v", got, want)
	}
	var v4 *networkingv1.IPBlock
	var allowed []string
	for i, b := range blocks {
		switch {
		case b.CIDR == "0.0.0.0/0":
			v4 = &blocks[i]
		case b.CIDR != "2000::/3":
			allowed = append(allowed, b.CIDR)
		}
	}
	if v4 == nil {
		t.Fatal("no IPv4 webhook egress")
	}
	for _, private := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"} {
		if !slices.Contains(v4.Except, private) {
			t.Errorf("webhook egress reaches %s, which relay's SSRF guard refuses", private)
		}
	}
	wantAllowed, _ := vs.values["relay"].(map[string]any)["allowCIDRs"].([]any)
	if fmt.Sprint(allowed) != fmt.Sprint(wantAllowed) && (len(allowed) != 0 || len(wantAllowed) != 0) {
		t.Errorf("egress opened to %v, RELAY_ALLOW_CIDRS is %v", allowed, wantAllowed)
	}
}

func checkServiceMonitor(t *testing.T, js []byte) {
	t.Helper()
	var sm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port, Path, Interval, ScrapeTimeout string
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(js, &sm); err != nil {
		t.Fatal(err)
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" {
		t.Errorf("%s %s", sm.APIVersion, sm.Kind)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("endpoints %+v: want /metrics on the http port", sm.Spec.Endpoints)
	}
	if sm.Metadata.Labels["release"] != "prometheus" {
		t.Errorf("labels %v: the values' labels are missing", sm.Metadata.Labels)
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 {
		t.Error("selects every Service")
	}
}

// The chart refuses what relay would refuse at start, at install time.
func TestChartRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		values     map[string]any
	}{
		{"nothing set", "relay.publicURL is required", map[string]any{}},
		{"no Redis host", "redis.standalone.host is required",
			merge(minimal(), map[string]any{"redis": map[string]any{"standalone": map[string]any{"host": ""}}})},
		{"no signing key", "hookKey.existingSecret or hookKey.pem is required",
			merge(minimal(), map[string]any{"hookKey": map[string]any{"pem": ""}})},
		{"no token key", "jwt.secret",
			merge(minimal(), map[string]any{"jwt": map[string]any{"secret": map[string]any{"value": ""}}})},
		{"a short JWT secret", "at least 32 bytes",
			merge(minimal(), map[string]any{"jwt": map[string]any{"secret": map[string]any{"value": "short"}}})},
		{"a grace period shorter than the drain", "terminationGracePeriodSeconds 20 is too short",
			merge(minimal(), map[string]any{"terminationGracePeriodSeconds": 20})},
		{"an unknown Redis mode", "mode",
			merge(minimal(), map[string]any{"redis": map[string]any{"mode": "replicated"}})},
		{"a misspelt setting", "publicUrl",
			merge(minimal(), map[string]any{"relay": map[string]any{"publicUrl": "https://x"}})},
		{"a Cluster of one seed", "at least two",
			merge(minimal(), map[string]any{"redis": map[string]any{"mode": "cluster", "cluster": map[string]any{"seeds": []any{"c-0:6379"}}}})},
		{"sentinel without a master", "masterName",
			merge(minimal(), map[string]any{"redis": map[string]any{"mode": "sentinel", "sentinel": map[string]any{"sentinels": []any{"s:26379"}}}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// Every RELAY_* variable relay serve reads is one the chart sets from its
// values, and the chart sets no other.
func TestChartReachesEverySetting(t *testing.T) {
	serve, err := os.ReadFile("../../cmd/relay/serve.go")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(chartDir + "/templates/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names := func(b []byte) []string {
		found := regexp.MustCompile(`"(RELAY_[A-Z_]+)"|name: (RELAY_[A-Z_]+)`).FindAllSubmatch(b, -1)
		var out []string
		for _, m := range found {
			out = append(out, string(m[1])+string(m[2]))
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	relay, chart := names(serve), names(tmpl)
	if len(relay) < 20 {
		t.Fatalf("found %d RELAY_* variables in serve.go: %v", len(relay), relay)
	}
	if !slices.Equal(relay, chart) {
		t.Errorf("relay serve reads %v\nthe chart sets %v", relay, chart)
	}
}
