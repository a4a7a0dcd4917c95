// Command vcsim starts govmomi's vCenter simulator (one datacenter, one cluster of hosts, one
// datastore, one resource pool) for the vSphere tests, and prints its SDK URL on stdout once it
// serves. Ours rather than govmomi's own vcsim command: that one is a module of its own which the
// Go module proxy does not serve, while the simulator package ships in govmomi's main module.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/vmware/govmomi/simulator"
	// Registers the REST endpoints (tags, content library) next to /sdk, as real vCenter serves.
	_ "github.com/vmware/govmomi/vapi/simulator"
)

func main() {
	listen := flag.String("l", "127.0.0.1:0", "address to listen on")
	username := flag.String("username", "user", "the one user name accepted")
	password := flag.String("password", "pass", "that user's password")
	flag.Parse()

	model := simulator.VPX()
	model.Autostart = false
	if err := model.Create(); err != nil {
		log.Fatalf("vcsim: creating the inventory: %v", err)
	}
	defer model.Remove()
	model.Service.RegisterEndpoints = true
	model.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(*username, *password)}
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
