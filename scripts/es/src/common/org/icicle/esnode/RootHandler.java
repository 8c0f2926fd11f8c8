package org.icicle.esnode;

import java.util.List;
import java.util.function.Supplier;

import org.elasticsearch.Build;
import org.elasticsearch.client.internal.node.NodeClient;
import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.common.bytes.BytesArray;
import org.elasticsearch.rest.BaseRestHandler;
import org.elasticsearch.rest.RestRequest;
import org.elasticsearch.rest.RestResponse;
import org.elasticsearch.rest.RestStatus;
import org.elasticsearch.xcontent.XContentBuilder;

/**
 * RootHandler answers GET / and HEAD / with the standard Elasticsearch info
 * document (name, cluster_name, cluster_uuid, version, tagline). RootPlugin
 * (one per major version: the plugin API differs) registers it.
 */
final class RootHandler extends BaseRestHandler {

    private final Supplier<ClusterService> clusterService;

    RootHandler(Supplier<ClusterService> clusterService) {
        this.clusterService = clusterService;
    }

    @Override
    public String getName() {
        return "icicle_main_action";
    }

    @Override
    public List<Route> routes() {
        return List.of(new Route(RestRequest.Method.GET, "/"), new Route(RestRequest.Method.HEAD, "/"));
    }

    @Override
    protected RestChannelConsumer prepareRequest(RestRequest request, NodeClient client) {
        if (request.method() == RestRequest.Method.HEAD) {
            return channel -> channel.sendResponse(new RestResponse(RestStatus.OK, "application/json", BytesArray.EMPTY));
        }
        return channel -> {
            ClusterService cs = clusterService.get();
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
}
