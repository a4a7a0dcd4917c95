// Command vcsim starts govmomi's vCenter simulator (one datacenter, one cluster of hosts, one
// datastore, one resource pool) for the vSphere tests, and prints its SDK URL on stdout once it
// serves. Ours rather than govmomi's own vcsim command: that one is a module of its own which the
// Go module proxy does not serve, while the simulator package ships in govmomi's main module.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vmware/govmomi/simulator"
	// Registers the REST endpoints (tags, content library) next to /sdk, as real vCenter serves.
	_ "github.com/vmware/govmomi/vapi/simulator"
)

func main() {
	listen := flag.String("l", "127.0.0.1:0", "address to listen on")
	username := flag.String("username", "user", "the one user name accepted")
	password := flag.String("password", "pass", "that user's password")
	caOut := flag.String("tls-ca-out", "", "serve HTTPS with a certificate for 127.0.0.1 "+
		"signed by a CA of its own, whose certificate is written to this file in PEM: a "+
		"vCenter with a private CA, as VMCA makes them")
	flag.Parse()

	model := simulator.VPX()
	model.Autostart = false
	if err := model.Create(); err != nil {
		log.Fatalf("vcsim: creating the inventory: %v", err)
	}
	defer model.Remove()
	model.Service.RegisterEndpoints = true
	model.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(*username, *password)}
	if *caOut != "" {
		leaf, ca, err := privateCA()
		if err != nil {
			log.Fatalf("vcsim: making certificates: %v", err)
		}
		block := &pem.Block{Type: "CERTIFICATE", Bytes: ca}
		if err := os.WriteFile(*caOut, pem.EncodeToMemory(block), 0o644); err != nil {
			log.Fatalf("vcsim: writing the CA certificate: %v", err)
		}
		model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	}
	server := model.Service.NewServer()
	defer server.Close()

	u := *server.URL
	u.User = nil
	fmt.Println(u.String())
	os.Stdout.Sync()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}

// privateCA makes a CA and a server certificate for 127.0.0.1 it signs; returns the server's
// key pair and the CA's certificate (DER).
func privateCA() (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "vcsim test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leafTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTemplate, caTemplate, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}, caDER, nil
}
