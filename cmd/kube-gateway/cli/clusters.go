package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/version/verflag"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// tableAccept asks the hub for the server-side Table kubectl get prints.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

func newClustersCommand() *cobra.Command {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	overrides := &clientcmd.ConfigOverrides{}
	timeout := 30 * time.Second
	output := ""
	cmd := &cobra.Command{
		Use:   "clusters",
		Short: "Print the member clusters (UpstreamClusters) of the hub and their health",
		Long: `Print the UpstreamClusters of the hub as a table: the columns "kubectl get
upstreamclusters" shows (name, number of servers, healthy servers, Ready, age;
with -o wide also the endpoints), as the gateway serves them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			cfg, err := hubClientConfig(rules, overrides)
			if err != nil {
				return err
			}
			cfg.Timeout = timeout
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			table := &metav1.Table{}
			err = cs.Discovery().RESTClient().Get().
				AbsPath("/apis", gatewayv1alpha1.SchemeGroupVersion.Group, gatewayv1alpha1.SchemeGroupVersion.Version, "upstreamclusters").
				Param("includeObject", string(metav1.IncludeNone)).
				SetHeader("Accept", tableAccept).
				Do(cmd.Context()).Into(table)
			if err != nil {
				return fmt.Errorf("listing upstreamclusters on the hub %s: %w", cfg.Host, err)
			}
			if output != "" && output != "wide" {
				return fmt.Errorf("--output %q: want wide or nothing", output)
			}
			return printTable(cmd.OutOrStdout(), table, output == "wide")
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&rules.ExplicitPath, "kubeconfig", "", "path of the hub kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&overrides.CurrentContext, "context", "", "context of the hub kubeconfig to use (default: its current context)")
	fs.StringVarP(&output, "output", "o", "", "wide: add the columns kubectl get -o wide adds (the servers' endpoints)")
	fs.DurationVar(&timeout, "request-timeout", timeout, "timeout of the request to the hub")
	defaults := &cobra.Command{}
	cmd.SetHelpFunc(defaults.HelpFunc())
	cmd.SetUsageFunc(defaults.UsageFunc())
	return cmd
}

// printTable prints the columns of priority 0 (all with wide), as kubectl
// get does.
func printTable(out io.Writer, t *metav1.Table, wide bool) error {
	if t.Kind != "Table" {
		return fmt.Errorf("the hub answered with %q, not a Table", t.Kind)
	}
	if len(t.Rows) == 0 {
		_, err := fmt.Fprintln(out, "No upstreamclusters found.")
		return err
	}
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	var cols []int
	var header []string
	for i, c := range t.ColumnDefinitions {
		if c.Priority == 0 || wide {
			cols = append(cols, i)
			header = append(header, strings.ToUpper(c.Name))
		}
	}
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, row := range t.Rows {
		cells := make([]string, 0, len(cols))
		for _, i := range cols {
			cell := ""
			if i < len(row.Cells) && row.Cells[i] != nil {
				cell = fmt.Sprint(row.Cells[i])
			}
			cells = append(cells, cell)
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	return w.Flush()
}
