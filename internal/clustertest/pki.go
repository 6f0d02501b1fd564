package clustertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ca is the cluster's one certificate authority: it signs the apiserver's
// serving certificate and every client certificate.
type ca struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
}

func newCA() (*ca, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, fmt.Errorf("ca serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "clustertest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	return &ca{cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der)}, nil
}

// leaf is a signed certificate and its key, PEM encoded.
type leaf struct {
	certPEM, keyPEM []byte
}

// sign issues a certificate for subject; with hosts it is a serving
// certificate for those names and IPs, without it a client certificate.
func (c *ca) sign(subject pkix.Name, hosts ...string) (leaf, error) {
	key, err := newKey()
	if err != nil {
		return leaf{}, fmt.Errorf("key for %s: %w", subject.CommonName, err)
	}
	sn, err := serial()
	if err != nil {
		return leaf{}, fmt.Errorf("serial for %s: %w", subject.CommonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return leaf{}, fmt.Errorf("certificate for %s: %w", subject.CommonName, err)
	}
	keyPEM, err := keyPEM(key)
	if err != nil {
		return leaf{}, fmt.Errorf("key for %s: %w", subject.CommonName, err)
	}
	return leaf{certPEM: pemBlock("CERTIFICATE", der), keyPEM: keyPEM}, nil
}

// keyPEM encodes key in SEC 1 form, the one every component reads (the
// apiserver's --service-account-key-file takes no PKCS #8).
func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// writeFiles writes name -> content under dir, keys readable only by us.
func writeFiles(dir string, files map[string][]byte) error {
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}

// restConfig is a client config for server authenticating with l.
func restConfig(server string, caPEM []byte, l leaf) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: l.certPEM,
			KeyData:  l.keyPEM,
		},
		// the default 5 QPS makes a test that creates many objects slow
		QPS:   100,
		Burst: 200,
	}
}

// writeKubeconfig writes a kubeconfig for cfg (certificates inline) to path.
func writeKubeconfig(path, user string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["clustertest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["clustertest"] = &clientcmdapi.Context{Cluster: "clustertest", AuthInfo: user}
	kc.CurrentContext = "clustertest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
