package org.elasticsearch.plugins;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.elasticsearch.Version;
import org.elasticsearch.action.admin.cluster.node.info.PluginsAndModules;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.jdk.ModuleQualifiedExportsService;

/**
 * IciclePluginsService is the stock PluginsService (it still scans the empty
 * modules/ and plugins/ directories) plus a fixed list of plugin classes that
 * are already on the class path.
 *
 * It lives in org.elasticsearch.plugins because LoadedPlugin, loadPlugin and
 * loadExtensions are package-private.
 */
public class IciclePluginsService extends PluginsService {

    private final List<LoadedPlugin> all;
    private final PluginsAndModules info;

    public IciclePluginsService(Settings settings, Environment env, List<Class<? extends Plugin>> classes) {
        super(settings, env.configFile(), env.modulesFile(), env.pluginsFile());
        List<LoadedPlugin> loaded = new ArrayList<>();
        List<PluginRuntimeInfo> infos = new ArrayList<>(super.info().getPluginInfos());
        for (Class<? extends Plugin> c : classes) {
            PluginDescriptor d = new PluginDescriptor(
                c.getName(), "class path module", Version.CURRENT.toString(), Version.CURRENT.toString(),
                Integer.toString(Runtime.version().feature()), c.getName(), null, List.of(),
                false, false, false, false);
            loaded.add(new LoadedPlugin(d, loadPlugin(c, settings, env.configFile())));
            infos.add(new PluginRuntimeInfo(d));
        }
        loadExtensions(loaded);
        loaded.addAll(super.plugins());
        this.all = List.copyOf(loaded);
        this.info = new PluginsAndModules(infos, super.info().getModuleInfos());
    }

    @Override
    protected final List<LoadedPlugin> plugins() {
        return all;
    }

    @Override
    public PluginsAndModules info() {
        return info;
    }

    @Override
    protected void addServerExportsService(Map<String, List<ModuleQualifiedExportsService>> exports) {
        // The server runs from the class path (unnamed module): there are no
        // qualified exports to wire.
    }
}
