// Command validate checks an OLM bundle directory with the operator
// framework's own validators: the default bundle suite that
// `operator-sdk bundle validate` always runs (bundle, CSV, CRDs) and its
// optional "operatorframework" suite (OperatorHub, capabilities, categories,
// good practices, deprecated APIs for the given Kubernetes version).
//
// It prints every finding and exits 1 on any error, and on any warning
// unless the warning's text is listed with -allow-warning (a known one,
// explained beside the CI call).
//
//	validate -k8s-version 1.33 [-allow-warning TEXT]... BUNDLE_DIR
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	apivalidation "github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ", ") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	k8sVersion := flag.String("k8s-version", "", "the oldest Kubernetes version the bundle supports (for the deprecated-API check)")
	var allowed list
	flag.Var(&allowed, "allow-warning", "a warning (substring of its text) that does not fail the check; repeatable")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: validate [-k8s-version V] [-allow-warning TEXT]... BUNDLE_DIR")
		os.Exit(2)
	}
	bundle, err := apimanifests.GetBundleFromDir(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot load the bundle: %v\n", err)
		os.Exit(1)
	}
	validators := interfaces.Validators{
		// The default suite.
		apivalidation.ClusterServiceVersionValidator,
		apivalidation.CustomResourceDefinitionValidator,
		apivalidation.BundleValidator,
		// The optional "operatorframework" suite.
		apivalidation.OperatorHubV2Validator,
		apivalidation.StandardCapabilitiesValidator,
		apivalidation.StandardCategoriesValidator,
		apivalidation.GoodPracticesValidator,
		apivalidation.AlphaDeprecatedAPIsValidator,
		// Not in either suite, and cheap: PodDisruptionBudgets and the like.
		apivalidation.ObjectValidator,
	}
	objects := append(bundle.ObjectsToValidate(), map[string]string{"k8s-version": *k8sVersion})
	failed := false
	for _, result := range validators.Validate(objects...) {
		for _, e := range result.Errors {
			failed = true
			fmt.Printf("ERROR   %s: %s\n", result.Name, e.Error())
		}
		for _, w := range result.Warnings {
			if rbacOnlyDeprecation(w) {
				fmt.Printf("allowed %s: a removed API named only by RBAC rules, which carry no API version: %s\n", result.Name, w.Error())
				continue
			}
			if isAllowed(w, allowed) {
				fmt.Printf("allowed %s: %s\n", result.Name, w.Error())
				continue
			}
			failed = true
			fmt.Printf("WARNING %s: %s\n", result.Name, w.Error())
		}
	}
	if failed {
		os.Exit(1)
	}
	fmt.Printf("bundle %s (%s) passed\n", bundle.Name, flag.Arg(0))
}

// The deprecated-API check reads an RBAC rule for, say, events.k8s.io events
// as a use of events.k8s.io/v1beta1, removed in 1.25; a rule names no
// version, and the operators use the served ones. A warning whose every
// location is an RBAC rule of the install strategy is therefore not a
// finding; one that also names a manifest still fails.
var quoted = regexp.MustCompile(`"([^"]+)"`)

func rbacOnlyDeprecation(w errors.Error) bool {
	text := w.Error()
	if !strings.Contains(text, "deprecated and removed") {
		return false
	}
	locations := quoted.FindAllStringSubmatch(text, -1)
	if len(locations) == 0 {
		return false
	}
	for _, l := range locations {
		if !strings.Contains(l[1], "Permissions[") || !strings.Contains(l[1], ".Rules[") {
			return false
		}
	}
	return true
}

func isAllowed(w errors.Error, allowed list) bool {
	for _, a := range allowed {
		if strings.Contains(w.Error(), a) {
			return true
		}
	}
	return false
}
