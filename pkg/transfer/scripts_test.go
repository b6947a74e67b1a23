package transfer_test

import (
	"testing"

	"github.com/sbx-sandbox/sbx/internal/scripttest"
)

func TestScriptsAreEmbedded(t *testing.T) { scripttest.CheckEmbedded(t) }
