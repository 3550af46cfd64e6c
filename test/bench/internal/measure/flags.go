package measure

import (
	"flag"
	"fmt"
	"strings"
)

// GatewayFlags registers -gateway-env and -gateway-arg on fs: the gateway's
// own environment and command line, appended to env and args.
func GatewayFlags(fs *flag.FlagSet, env, args *[]string) {
	fs.Func("gateway-env", "KEY=VALUE added to the gateway's environment only, e.g. GOGC=400 (repeatable)", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("%q is not KEY=VALUE", v)
		}
		*env = append(*env, v)
		return nil
	})
	fs.Func("gateway-arg", "an argument appended to the gateway's command line, e.g. --disable-http2-serving (repeatable)", func(v string) error {
		*args = append(*args, v)
		return nil
	})
}
