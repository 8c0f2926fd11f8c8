package org.icicle.esnode;

import java.util.Collection;
import java.util.List;
import java.util.function.Predicate;
import java.util.function.Supplier;

import org.elasticsearch.Build;
import org.elasticsearch.cluster.metadata.IndexNameExpressionResolver;
import org.elasticsearch.cluster.node.DiscoveryNodes;
import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.common.bytes.BytesArray;
import org.elasticsearch.common.io.stream.NamedWriteableRegistry;
import org.elasticsearch.common.settings.ClusterSettings;
import org.elasticsearch.common.settings.IndexScopedSettings;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.common.settings.SettingsFilter;
import org.elasticsearch.features.NodeFeature;
import org.elasticsearch.plugins.ActionPlugin;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.rest.BaseRestHandler;
import org.elasticsearch.rest.RestController;
import org.elasticsearch.rest.RestHandler;
import org.elasticsearch.rest.RestRequest;
import org.elasticsearch.rest.RestResponse;
import org.elasticsearch.rest.RestStatus;
import org.elasticsearch.xcontent.XContentBuilder;

/**
 * RootPlugin answers GET / and HEAD / with the standard Elasticsearch info
 * document (name, cluster_name, cluster_uuid, version, tagline).
 *
 * In the distribution this is the rest-root module, which Elastic does not
 * publish to Maven Central; clients (go-elasticsearch Info/Ping) need it.
 */
public class RootPlugin extends Plugin implements ActionPlugin {

    private volatile ClusterService clusterService;

    @Override
    public Collection<?> createComponents(PluginServices services) {
        clusterService = services.clusterService();
        return List.of();
    }

    @Override
    public Collection<RestHandler> getRestHandlers(Settings settings, NamedWriteableRegistry registry,
            RestController controller, ClusterSettings clusterSettings, IndexScopedSettings indexScopedSettings,
            SettingsFilter settingsFilter, IndexNameExpressionResolver resolver, Supplier<DiscoveryNodes> nodes,
            Predicate<NodeFeature> clusterSupportsFeature) {
        return List.of(new BaseRestHandler() {
            @Override
            public String getName() {
                return "icicle_main_action";
            }

            @Override
            public List<Route> routes() {
                return List.of(new Route(RestRequest.Method.GET, "/"), new Route(RestRequest.Method.HEAD, "/"));
            }

            @Override
            protected RestChannelConsumer prepareRequest(RestRequest request,
                    org.elasticsearch.client.internal.node.NodeClient client) {
                if (request.method() == RestRequest.Method.HEAD) {
                    return channel -> channel.sendResponse(
                        new RestResponse(RestStatus.OK, "application/json", BytesArray.EMPTY));
                }
                return channel -> {
                    ClusterService cs = clusterService;
                    Build b = Build.current();
                    XContentBuilder x = channel.newBuilder();
                    x.startObject();
                    x.field("name", cs.getNodeName());
                    x.field("cluster_name", cs.getClusterName().value());
                    x.field("cluster_uuid", cs.state().metadata().clusterUUID());
                    x.startObject("version")
                        .field("number", b.qualifiedVersion())
                        .field("build_flavor", b.flavor())
                        .field("build_type", b.type().displayName())
                        .field("build_hash", b.hash())
                        .field("build_date", b.date())
                        .field("build_snapshot", b.isSnapshot())
                        .field("lucene_version", org.apache.lucene.util.Version.LATEST.toString())
                        .field("minimum_wire_compatibility_version", b.minWireCompatVersion())
                        .field("minimum_index_compatibility_version", b.minIndexCompatVersion())
                        .endObject();
                    x.field("tagline", "You Know, for Search");
                    x.endObject();
                    channel.sendResponse(new RestResponse(RestStatus.OK, x));
                };
            }
        });
    }
}
