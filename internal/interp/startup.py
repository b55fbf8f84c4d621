# hutch's code interpreter: what a Python kernel runs at start
# (IPKernelApp.exec_files) so that its results carry what E2B's Code
# Interpreter SDK reads besides text and images:
#   e2b/chart        a matplotlib figure as chart data
#   e2b/data         a pandas DataFrame as columns of values
#   application/json a plain list or dict
# and so that a PIL image saved to a file name is shown too, as E2B's
# kernels do (Image.save displays the image when given a path string).
# A formatter that fails gives no representation: the other ones still go.


def _hutch_setup():
    import datetime
    import json
    import math
    import re
    import sys

    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter, JSONFormatter
    from traitlets import ObjectName, Unicode

    ip = get_ipython()
    if ip is None:
        return

    def plain(v):
        """v as a JSON value: numpy scalars, dates and non-finite floats."""
        if isinstance(v, (datetime.datetime, datetime.date)):
            return v.isoformat()
        if hasattr(v, "isoformat"):  # pandas.Timestamp
            return v.isoformat()
        if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
            try:
                v = v.item()
            except Exception:
                return str(v)
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return str(v)

    def unit(label):
        m = re.search(r"\(([^)]*)\)|\[([^\]]*)\]", label or "")
        if not m:
            return None
        return m.group(1) if m.group(1) is not None else m.group(2)

    def axis_fields(ax, swap=False):
        xl, yl = ax.get_xlabel() or None, ax.get_ylabel() or None
        if swap:
            xl, yl = yl, xl
        return {"x_label": xl, "y_label": yl, "x_unit": unit(xl), "y_unit": unit(yl)}

    def is_date(axis):
        import matplotlib.dates as mdates
        conv = getattr(axis, "converter", None)
        kinds = tuple(k for k in (getattr(mdates, n, None) for n in ("DateConverter", "ConciseDateConverter", "_SwitchableDateConverter")) if k)
        return isinstance(conv, kinds)

    def tick_values(axis, date):
        import matplotlib.dates as mdates
        ticks = [float(t) for t in axis.get_ticklocs()]
        if date:
            return [mdates.num2date(t).replace(tzinfo=None).isoformat() for t in ticks]
        return ticks

    def scale(axis, ticks, labels):
        if is_date(axis):
            return "datetime"
        s = axis.get_scale()
        if s != "linear":
            return s
        if ticks and labels and all(float(t) == i for i, t in enumerate(ticks)) and any(l != str(i) for i, l in enumerate(labels)):
            return "categorical"
        return "linear"

    def point_fields(ax):
        out = {}
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            date = is_date(axis)
            raw = [float(t) for t in axis.get_ticklocs()]
            labels = [t.get_text() for t in axis.get_ticklabels()]
            out[name + "_ticks"] = tick_values(axis, date)
            out[name + "_tick_labels"] = labels
            out[name + "_scale"] = scale(axis, raw, labels)
        return out

    def xvalue(ax, v):
        import matplotlib.dates as mdates
        if is_date(ax.xaxis):
            try:
                return mdates.num2date(float(mdates.date2num(v))).replace(tzinfo=None).isoformat()
            except Exception:
                return plain(v)
        return plain(v)

    def grid_line(line):
        x, y = line.get_xdata(), line.get_ydata()
        return len(x) == 2 and (x[0] == x[1] or y[0] == y[1]) and line.get_label().startswith("_")

    def child_label(label, kind):
        m = re.fullmatch(r"_(child|container)(\d+)", label or "")
        if m:
            return "%s %s" % (kind, m.group(2))
        return label

    def axes_chart(ax):
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer
        from matplotlib.patches import Rectangle, Wedge

        title = ax.get_title() or None
        box = getattr(ax, "_hutch_box", None)
        if box:
            chart = {"type": "box_and_whisker", "title": title}
            chart.update(axis_fields(ax))
            chart["elements"] = [
                {"label": str(s.get("label", i + 1)), "min": plain(s["whislo"]), "first_quartile": plain(s["q1"]),
                 "median": plain(s["med"]), "third_quartile": plain(s["q3"]), "max": plain(s["whishi"]),
                 "outliers": plain(list(s["fliers"]))}
                for i, s in enumerate(box)]
            return chart
        lines = [l for l in ax.lines if not grid_line(l)]
        points = [c for c in ax.collections if isinstance(c, PathCollection)]
        patches = list(ax.patches)
        if patches and not lines and not points and all(isinstance(p, Wedge) for p in patches):
            return {"type": "pie", "title": title, "elements": [
                {"label": p.get_label(), "angle": float("%.6g" % abs(p.theta2 - p.theta1)), "radius": plain(p.r)} for p in patches]}
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        if bars and not lines and not points and all(isinstance(p, Rectangle) for p in patches):
            horizontal = getattr(bars[0], "orientation", "vertical") == "horizontal"
            axis = ax.yaxis if horizontal else ax.xaxis
            names = {float(t): l.get_text() for t, l in zip(axis.get_ticklocs(), axis.get_ticklabels())}
            chart = {"type": "bar", "title": title}
            chart.update(axis_fields(ax, swap=horizontal))
            elements = []
            for c in bars:
                group = child_label(c.get_label(), "Group")
                for r in c.patches:
                    if horizontal:
                        at, value = r.get_y() + r.get_height() / 2, r.get_width()
                    else:
                        at, value = r.get_x() + r.get_width() / 2, r.get_height()
                    label = names.get(float(at))
                    if label is None:
                        label = ("%g" % at)
                    elements.append({"label": label, "group": group, "value": plain(value)})
            chart["elements"] = elements
            return chart
        if points and not lines and not patches:
            chart = {"type": "scatter", "title": title}
            chart.update(axis_fields(ax))
            chart.update(point_fields(ax))
            chart["elements"] = [{"label": c.get_label(), "points": [[xvalue(ax, x), plain(y)] for x, y in c.get_offsets()]} for c in points]
            return chart
        if lines and not points and not patches:
            chart = {"type": "line", "title": title}
            chart.update(axis_fields(ax))
            chart.update(point_fields(ax))
            chart["elements"] = [{"label": child_label(l.get_label(), "Line"),
                                  "points": [[xvalue(ax, x), plain(y)] for x, y in zip(l.get_xdata(), l.get_ydata())]} for l in lines]
            return chart
        if not lines and not points and not patches:
            return None
        return {"type": "unknown", "title": title, "elements": []}

    def figure_chart(fig):
        fig.canvas.draw()  # tick labels exist only once drawn
        charts = [c for c in (axes_chart(ax) for ax in fig.axes) if c]
        if not charts:
            return None
        if len(charts) == 1:
            return charts[0]
        title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else None
        return {"type": "superchart", "title": title or None, "elements": charts}

    def wrap_boxplot():
        from matplotlib import cbook
        from matplotlib.axes import Axes
        if getattr(Axes.boxplot, "_hutch", False):
            return
        original = Axes.boxplot

        def boxplot(self, x, *args, **kwargs):
            out = original(self, x, *args, **kwargs)
            try:
                whis = kwargs.get("whis", 1.5)
                labels = kwargs.get("labels") or kwargs.get("tick_labels")
                self._hutch_box = cbook.boxplot_stats(x, whis=whis, labels=labels)
            except Exception:
                pass
            return out

        boxplot._hutch = True
        Axes.boxplot = boxplot

    def wrap_image_save():
        from IPython.display import display
        from PIL.Image import Image
        if getattr(Image.save, "_hutch", False):
            return
        original = Image.save

        def save(self, fp, format=None, **params):
            out = original(self, fp, format, **params)
            if isinstance(fp, str):
                display(self)
            return out

        save._hutch = True
        Image.save = save

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")

        def __call__(self, obj):
            if "matplotlib" in sys.modules:
                from matplotlib.figure import Figure
                if isinstance(obj, Figure):
                    try:
                        return figure_chart(obj)
                    except Exception:
                        return None
            return None

    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")

        def __call__(self, obj):
            if "pandas" in sys.modules:
                import pandas
                if isinstance(obj, pandas.DataFrame):
                    try:
                        return plain(obj.to_dict(orient="list"))
                    except Exception:
                        return None
            return None

    class PlainJSONFormatter(JSONFormatter):
        def __call__(self, obj):
            if type(obj) in (list, dict):
                try:
                    value = plain(obj)
                    json.dumps(value)
                    return value
                except Exception:
                    return None
            return super().__call__(obj)

    formatters = ip.display_formatter.formatters
    formatters["e2b/chart"] = ChartFormatter(parent=ip.display_formatter)
    formatters["e2b/data"] = DataFormatter(parent=ip.display_formatter)
    formatters["application/json"] = PlainJSONFormatter(parent=ip.display_formatter)
    ip.display_formatter.active_types = list(formatters)

    # Axes.boxplot keeps its statistics for the chart: matplotlib.axes is
    # imported now (the backend is still chosen by the code), which a warm
    # kernel does ahead of its first execution.
    try:
        import matplotlib.axes  # noqa: F401
        wrap_boxplot()
    except Exception:
        pass
    # Image.save shows what it saved to a file name: PIL is imported now
    # (matplotlib imports it already).
    try:
        wrap_image_save()
    except Exception:
        pass

_hutch_setup()
del _hutch_setup
