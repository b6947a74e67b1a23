package enginetest

import (
	"context"
	_ "embed"
	"io"
	"strings"

	"github.com/docker/docker/api/types/build"
)

// AnswerBuild is an ImageBuildFn whose engine answers every build with stream, the
// builder's JSON messages.
func AnswerBuild(stream string) func(context.Context, io.Reader, build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	return func(context.Context, io.Reader, build.ImageBuildOptions) (build.ImageBuildResponse, error) {
		return build.ImageBuildResponse{Body: io.NopCloser(strings.NewReader(stream))}, nil
	}
}

// CachedBuild is what Docker 20.10's classic builder sent for a build of the sandbox image
// with every step cached, cut to five steps.
//
//go:embed testdata/cached-build.jsonl
var CachedBuild string

// FailedBuild is a real failing RUN step: 26 lines of output, the last without a newline.
//
//go:embed testdata/failed-build.jsonl
var FailedBuild string
