// Package deploy holds no code. Its test (deploy_test.go) checks what ships
// the binaries to a machine: the Dockerfile, compose.yaml and the Kubernetes
// manifests in deploy/kubernetes. It builds the binaries with the
// Dockerfile's own `go build` line from what the .dockerignore lets into the
// build context, checks that they are static, runs them with the image's
// defaults, and checks that every manifest parses and refers to binaries,
// flags, ports, Secrets and environment variables that exist.
//
// The image itself is built and run by scripts/container-test.sh (make
// container-test, once in CI), with podman, not by go test: a build takes
// minutes and root. The test here only checks that the base images that
// script builds locally are the ones the Dockerfile names, and podman's
// settings in deploy/podman/containers.conf. Compose and Kubernetes are not
// run: compose's PostgreSQL image cannot be pulled here, and there is no
// cluster.
package deploy
