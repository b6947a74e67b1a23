// Package sandbox creates, runs and removes sandboxes on a Docker engine.
package sandbox
