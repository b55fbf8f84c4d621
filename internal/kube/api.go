package kube

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// hutch speaks to the API server through client-go's REST client (its
// kubeconfig loading, authentication — exec plugins included —,
// retries and watches) with a scheme of the few kinds it uses: client-go's
// clientsets register every API group, which would add tens of megabytes
// to hutch serve.
var (
	scheme    = runtime.NewScheme()
	codecs    = serializer.NewCodecFactory(scheme)
	paramCode = runtime.NewParameterCodec(scheme)
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, nodev1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
}

// api is one API group's REST client.
type api struct{ rc *rest.RESTClient }

// newAPI is the client of group version gv, at path ("/api" for the core
// group, "/apis" for the others).
func newAPI(cfg *rest.Config, path string, gv schema.GroupVersion) (api, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = path
	c.GroupVersion = &gv
	c.NegotiatedSerializer = codecs.WithoutConversion()
	c.ContentType = runtime.ContentTypeJSON
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return api{}, fmt.Errorf("kubernetes: %w", err)
	}
	return api{rc}, nil
}

// req is a request of verb in namespace ns ("": a cluster-wide resource).
func (a api) req(verb, ns string) *rest.Request {
	r := a.rc.Verb(verb)
	if ns != "" {
		r = r.Namespace(ns)
	}
	return r
}

// get reads object name of resource into out ("" namespace for a
// cluster-wide resource).
func (a api) get(ctx context.Context, ns, resource, name string, out runtime.Object) error {
	return a.req("GET", ns).Resource(resource).Name(name).Do(ctx).Into(out)
}

// list reads the objects of resource that sel selects into out.
func (a api) list(ctx context.Context, ns, resource string, sel metav1.ListOptions, out runtime.Object) error {
	return a.req("GET", ns).Resource(resource).VersionedParams(&sel, paramCode).Do(ctx).Into(out)
}

// create makes obj and reads what was made into out.
func (a api) create(ctx context.Context, ns, resource string, obj, out runtime.Object) error {
	return a.req("POST", ns).Resource(resource).Body(obj).Do(ctx).Into(out)
}

// update replaces object name with obj, read back into out.
func (a api) update(ctx context.Context, ns, resource, name string, obj, out runtime.Object) error {
	return a.req("PUT", ns).Resource(resource).Name(name).Body(obj).Do(ctx).Into(out)
}

// delete deletes object name.
func (a api) delete(ctx context.Context, ns, resource, name string, opts metav1.DeleteOptions) error {
	return a.req("DELETE", ns).Resource(resource).Name(name).Body(&opts).Do(ctx).Error()
}

// watch watches the objects of resource that sel selects.
func (a api) watch(ctx context.Context, ns, resource string, sel metav1.ListOptions) (watch.Interface, error) {
	sel.Watch = true
	return a.req("GET", ns).Resource(resource).VersionedParams(&sel, paramCode).Watch(ctx)
}
