// Package deploy holds no code. Its test (deploy_test.go) checks what ships
// the binaries to a machine: the Dockerfile, compose.yaml and the Kubernetes
// manifests in deploy/kubernetes, none of which the test machine can run (it
// has no container engine). It builds the binaries with the Dockerfile's own
// `go build` line from what the .dockerignore lets into the build context,
// checks that they are static, runs them with the image's defaults, and
// checks that every manifest parses and refers to binaries, flags, ports,
// Secrets and environment variables that exist.
package deploy
