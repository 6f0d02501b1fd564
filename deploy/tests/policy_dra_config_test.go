package tests_test

import (
	"context"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

// msgNoConfig is a substring of the dra-no-config policy's message.
const msgNoConfig = "driver lpu.hyperaccel.ai takes no opaque config"

// TestDRAConfigPolicy installs the chart's dra-no-config policy in a real
// kube-apiserver v1.37: claims, claim templates and DeviceClasses passing
// opaque config to lpu.hyperaccel.ai are refused with a message saying the
// driver takes none; config for other drivers, and no config, pass.
func TestDRAConfigPolicy(t *testing.T) {
	helm := charttest.Helm(t)
	c := clustertest.Start(t, gateClusterOptions)
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	rendered := charttest.Render(t, helm, "--show-only", "templates/dra-config-policy.yaml", "mode=dra")
	if kinds := charttest.InstallPolicies(ctx, t, cs, rendered); len(kinds) != 2 || kinds["ValidatingAdmissionPolicy"] != 1 {
		t.Fatalf("rendered kinds %v, want one ValidatingAdmissionPolicy and its binding", kinds)
	}
	makeNamespaces(ctx, t, cs, map[string]map[string]string{"tenant": nil})
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	eventuallyPolicy(ctx, t, func() error {
		if _, err := cs.ResourceV1().ResourceClaims("tenant").Create(ctx, claimWithConfig("probe", "lpu.hyperaccel.ai"), dry); err == nil {
			return errString("claim with config not refused yet")
		}
		return nil
	})
	noTypeWarnings(ctx, t, cs)

	create := map[string]func(driver string) error{
		"ResourceClaim": func(driver string) error {
			_, err := cs.ResourceV1().ResourceClaims("tenant").Create(ctx, claimWithConfig("c-"+driverSuffix(driver), driver), metav1.CreateOptions{})
			return err
		},
		"ResourceClaimTemplate": func(driver string) error {
			tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t-" + driverSuffix(driver), Namespace: "tenant"},
				Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimWithConfig("", driver).Spec}}
			_, err := cs.ResourceV1().ResourceClaimTemplates("tenant").Create(ctx, tmpl, metav1.CreateOptions{})
			return err
		},
		"DeviceClass": func(driver string) error {
			dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "d-" + driverSuffix(driver)}}
			if driver != "" {
				dc.Spec.Config = []resourcev1.DeviceClassConfiguration{{DeviceConfiguration: opaque(driver)}}
			}
			_, err := cs.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
			return err
		},
	}
	for kind, mk := range create {
		t.Run(kind, func(t *testing.T) {
			wantRefusal(t, mk("lpu.hyperaccel.ai"), msgNoConfig)
			wantRefusal(t, mk("lpu.hyperaccel.ai"), kind)
			if err := mk("gpu.example.com"); err != nil {
				t.Errorf("config for another driver: %v", err)
			}
			if err := mk(""); err != nil {
				t.Errorf("no config: %v", err)
			}
		})
	}
	// Config for another driver next to ours is still refused: the entry
	// for lpu.hyperaccel.ai is what counts.
	both := claimWithConfig("both", "gpu.example.com")
	both.Spec.Devices.Config = append(both.Spec.Devices.Config, resourcev1.DeviceClaimConfiguration{DeviceConfiguration: opaque("lpu.hyperaccel.ai")})
	_, err := cs.ResourceV1().ResourceClaims("tenant").Create(ctx, both, metav1.CreateOptions{})
	wantRefusal(t, err, msgNoConfig)
}

// driverSuffix names the object after the driver its config is for.
func driverSuffix(driver string) string {
	switch driver {
	case "":
		return "none"
	case "lpu.hyperaccel.ai":
		return "lpu"
	}
	return "other"
}

func opaque(driver string) resourcev1.DeviceConfiguration {
	return resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
		Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(`{"mode":"fast"}`)}}}
}

// claimWithConfig is a claim for one 4-arc with opaque config for driver
// (none when driver is "").
func claimWithConfig(name, driver string) *resourcev1.ResourceClaim {
	rc := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "lpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "lpu-arc-4.hyperaccel.ai"}}}}}}
	if driver != "" {
		rc.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{Requests: []string{"lpus"}, DeviceConfiguration: opaque(driver)}}
	}
	return rc
}
