// Pins govmomi's vCenter simulator for the vSphere tests (hack/ensure-vcsim.sh builds it).
module github.com/boot-image-controller/hack/tools/vcsim

go 1.24.0

require github.com/vmware/govmomi v0.52.0

require github.com/google/uuid v1.6.0 // indirect
