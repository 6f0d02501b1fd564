package tests_test

import (
	"context"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// msgClaimScope is a substring of the lpu-claims policies' message.
const msgClaimScope = "requesting an LPU DeviceClass"

// testGateClaimScope: outside the opted-in namespaces an LPU claim comes
// only by a gated name (a chart template, or a claim the resource claim
// controller or the scheduler makes), so no LPU pod there goes ungated,
// while another vendor's claims and templates are not looked at.
func testGateClaimScope(ctx context.Context, t *testing.T, cs kubernetes.Interface, cfg *rest.Config) {
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	eventuallyPolicy(ctx, t, func() error {
		if _, err := cs.ResourceV1().ResourceClaims("gpu-team").Create(ctx, lpuClaim("probe", "lpu-arc-4.hyperaccel.ai", nil), dry); err == nil {
			return errString("standalone LPU claim not refused yet")
		}
		return nil
	})
	as := func(user string) kubernetes.Interface {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
		return kubernetes.NewForConfigOrDie(c)
	}
	generated := map[string]string{"resource.kubernetes.io/pod-claim-name": "lpus"}
	extended := map[string]string{"resource.kubernetes.io/extended-resource-claim": "true"} // what the scheduler writes
	claims := map[string]struct {
		ns, class string
		ann       map[string]string
		by        kubernetes.Interface
		wantErr   string
	}{
		"standalone LPU claim refused outside opted-in namespaces": {ns: "gpu-team", class: "lpu-arc-4.hyperaccel.ai", by: cs, wantErr: msgClaimScope},
		"listed extra LPU class refused too":                       {ns: "gpu-team", class: "custom-lpu.example.com", by: cs, wantErr: msgClaimScope},
		"a forged generated-claim annotation is refused":           {ns: "gpu-team", class: "lpu.hyperaccel.ai", ann: generated, by: cs, wantErr: msgClaimScope},
		"the resource claim controller's claim is allowed": {ns: "gpu-team", class: "lpu-arc-4.hyperaccel.ai", ann: generated,
			by: as("system:serviceaccount:kube-system:resource-claim-controller")},
		"the scheduler's extended-resource claim is allowed":    {ns: "gpu-team", class: "lpu-arc-4.hyperaccel.ai", ann: extended, by: as("system:kube-scheduler")},
		"the scheduler's count-path claim is allowed":           {ns: "gpu-team", class: "lpu-count.hyperaccel.ai", ann: extended, by: as("system:kube-scheduler")},
		"a forged extended-resource annotation is refused":      {ns: "gpu-team", class: "lpu-count.hyperaccel.ai", ann: extended, by: cs, wantErr: msgClaimScope},
		"standalone LPU claim allowed in an opted-in namespace": {ns: "tenant", class: "lpu-arc-4.hyperaccel.ai", by: cs},
		"another vendor's claim is not looked at":               {ns: "gpu-team", class: "gpu.example.com", by: cs},
	}
	for name, tc := range claims {
		t.Run(name, func(t *testing.T) {
			_, err := tc.by.ResourceV1().ResourceClaims(tc.ns).Create(ctx, lpuClaim("c", tc.class, tc.ann), dry)
			if tc.wantErr != "" {
				wantRefusal(t, err, tc.wantErr)
			} else if err != nil {
				t.Fatalf("create: %v", err)
			}
		})
	}
	templates := map[string]struct {
		ns, name, class string
		wantErr         string
	}{
		"an LPU template of a gated name is allowed":          {ns: "gpu-team", name: "lpu-arc-4", class: "lpu-arc-4.hyperaccel.ai"},
		"an LPU template of another name is refused":          {ns: "gpu-team", name: "my-lpus", class: "lpu-arc-4.hyperaccel.ai", wantErr: msgClaimScope},
		"an LPU template is allowed in an opted-in namespace": {ns: "tenant", name: "my-lpus", class: "lpu.hyperaccel.ai"},
		"another vendor's template is not looked at":          {ns: "gpu-team", name: "gpu-claim", class: "gpu.example.com"},
	}
	for name, tc := range templates {
		t.Run(name, func(t *testing.T) {
			tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: tc.name},
				Spec: resourcev1.ResourceClaimTemplateSpec{Spec: lpuClaim("", tc.class, nil).Spec}}
			_, err := cs.ResourceV1().ResourceClaimTemplates(tc.ns).Create(ctx, tmpl, dry)
			if tc.wantErr != "" {
				wantRefusal(t, err, tc.wantErr)
			} else if err != nil {
				t.Fatalf("create: %v", err)
			}
		})
	}
	// firstAvailable (the best-effort shape) is judged by every subrequest.
	best := lpuClaim("best", "gpu.example.com", nil)
	best.Spec.Devices.Requests[0] = resourcev1.DeviceRequest{Name: "lpus", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "gpu", DeviceClassName: "gpu.example.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
		{Name: "lpu", DeviceClassName: "lpu-arc-1.hyperaccel.ai", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}
	_, err := cs.ResourceV1().ResourceClaims("gpu-team").Create(ctx, best, dry)
	wantRefusal(t, err, msgClaimScope)
}

// lpuClaim is a claim of one device of class.
func lpuClaim(name, class string, ann map[string]string) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "lpus",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}
}
