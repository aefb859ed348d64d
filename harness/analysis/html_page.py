"""The HTML page kit: one self-contained file per result, sweep, compare, capacity or plan.

Python turns the document into a small page description (tables, charts, a timeline) embedded
as JSON in a `<script type="application/json">` block, with `<`, `>`, `&` and the JS line
separators escaped so no string from a server or scenario can close the block. Inline JS
(`_JS`, no libraries) draws each chart as SVG and writes every text through `textContent`,
never `innerHTML`, so names from results are shown, not run. Each chart records how many
points it drew in `data-points`; the page sets `data-rendered` on <body> when done and
`data-js-errors` if a script error happened (the browser test reads both).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import orjson

from harness.analysis.html_safe import (
    bounded_points,
    downsample_note,
    html_text,
    safe_strings,
)
from harness.analysis.html_trust import BANNER_TITLE
from harness.safe_write import write_file


def _embed(obj: Any) -> str:
    text = orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def write_html(path: Path, text: str) -> None:
    """Write a page atomically (harness.safe_write: no link followed, no device replaced)."""
    write_file(path, text)


def page(
    title: str,
    subtitle: list[str],
    sections: list[dict[str, Any]],
    banner: list[str] | None = None,
) -> str:
    """The page of every HTML view; every string in it escaped once here (html_safe).
    `banner`: lines that say the page's figures are not to be trusted as they stand
    (harness.analysis.html_trust), drawn above the title in the HTML itself (no script needed)
    as a red block with role="alert"; the <title> then starts with NOT TRUSTWORTHY."""
    data = safe_strings({"title": title, "subtitle": subtitle, "sections": sections})
    lines = [html_text(x) for x in banner or []]
    head = f"{BANNER_TITLE}: {data['title']}" if lines else data["title"]
    block = (
        '<div id="banner" class="banner" role="alert">'
        + "".join(f"<p>{html.escape(x)}</p>" for x in lines)
        + "</div>\n"
        if lines
        else ""
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(head)}</title><style>{_CSS}</style></head>\n<body>\n{block}"
        f'<div id="app"></div>\n<script type="application/json" id="page-data">{_embed(data)}</script>\n'
        f"<script>{_JS}</script>\n</body></html>\n"
    )


def chart(
    title: str,
    xlabel: str,
    ylabel: str,
    series: list[dict[str, Any]],
    *,
    xlog: bool = False,
    ylog: bool = False,
    xkind: str = "linear",
    note: str = "",
    markers: bool = False,
) -> dict[str, Any]:
    """A line chart; series: [{"name", "points": [[x, y], ...] or an (n, 2) array, "dash"?: bool,
    "only_markers"?: bool}]. A long series is downsampled (html_safe), and the note says so."""
    clean, total, drawn = [], 0, 0
    for s in series:
        pts, n = bounded_points(s["points"], xlog=xlog, ylog=ylog)
        total, drawn = total + n, drawn + len(pts)
        if pts:
            clean.append({**s, "points": pts})
    if drawn < total:
        note = f"{note}; {downsample_note(drawn, total)}" if note else downsample_note(drawn, total)
    return {
        "type": "chart",
        "title": title,
        "xlabel": xlabel,
        "ylabel": ylabel,
        "series": clean,
        "xlog": xlog,
        "ylog": ylog,
        "xkind": xkind,
        "note": note,
        "markers": markers,
    }


def table(
    title: str, head: list[str], rows: list[list[Any]], classes: list[str] | None = None
) -> dict[str, Any]:
    return {
        "type": "table",
        "title": title,
        "head": head,
        "rows": [[str(c) for c in r] for r in rows],
        "classes": classes or [],
    }


def keep_drawn(sections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop charts without data (the page says so in a note instead of drawing an empty frame)."""
    out = []
    for s in sections:
        if s["type"] == "chart" and not s["series"]:
            out.append({"type": "note", "text": f"{s['title']}: no data in this result"})
        else:
            out.append(s)
    return out


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:20px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 6px}
.sub{color:#555;margin:0}table{border-collapse:collapse;margin:4px 0}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
th{background:#f3f3f3}tr.fail td{background:#fde2e2}tr.pass td{background:#e3f6e3}
.note{color:#666;font-style:italic}.chart{display:inline-block;vertical-align:top;margin:6px 12px 6px 0}
.chart svg{background:#fff;border:1px solid #ddd}.wide svg{width:100%}
.banner{background:#b00020;color:#fff;font-weight:bold;font-size:16px;padding:8px 14px;margin:0 0 14px;border-radius:4px}
.banner p{margin:4px 0}
"""

_JS = r"""
(function(){
'use strict';
var errors=[];
window.addEventListener('error',function(e){errors.push(String(e.message));document.body.dataset.jsErrors=errors.join(' | ');});
var NS='http://www.w3.org/2000/svg';
var COLORS=['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f','#bcbd22','#17becf'];
function el(tag,attrs,text){var e=document.createElement(tag);for(var k in attrs||{})e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function sv(tag,attrs,text){var e=document.createElementNS(NS,tag);for(var k in attrs||{})e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function fmt(v){var a=Math.abs(v);if(a>=1e6)return (v/1e6).toPrecision(3)+'M';if(a>=1e4)return (v/1e3).toPrecision(3)+'k';if(a>=100)return v.toFixed(0);if(a>=1)return v.toPrecision(3);if(a===0)return '0';return v.toPrecision(2);}
function pctLabel(x){var p=100*(1-1/x);if(p<=0)return '0%';var d=Math.max(0,Math.round(Math.log10(x))-2);return p.toFixed(d)+'%';}
function ticks(lo,hi,log){var t=[];var inside=function(v){return v>=lo*0.999&&v<=hi*1.001;};if(log){var a=Math.floor(Math.log10(lo)),b=Math.ceil(Math.log10(hi));for(var i=a;i<=b;i++){t.push(Math.pow(10,i));}t=t.filter(inside);if(t.length<3){t=[];for(var j=a;j<=b;j++){[1,2,5].forEach(function(m){t.push(m*Math.pow(10,j));});}t=t.filter(inside);}return t;}
 var span=hi-lo||1,step=Math.pow(10,Math.floor(Math.log10(span/5)));[1,2,5,10].some(function(m){if(span/(step*m)<=6){step*=m;return true;}return false;});
 for(var v=Math.ceil(lo/step)*step;v<=hi+step*1e-9;v+=step)t.push(v);return t;}
function scale(lo,hi,a,b,log){if(log){var l0=Math.log10(lo),l1=Math.log10(hi);if(l1===l0){l1+=1;}return function(v){return a+(Math.log10(v)-l0)/(l1-l0)*(b-a);};}
 if(hi===lo){hi=lo+1;}return function(v){return a+(v-lo)/(hi-lo)*(b-a);};}
function range(vals,log){var lo=Infinity,hi=-Infinity;vals.forEach(function(v){if(v<lo)lo=v;if(v>hi)hi=v;});
 if(log){if(lo===hi){lo/=2;hi*=2;}return [lo/1.1,hi*1.1];}if(lo>0&&lo<hi*0.5)lo=0;if(lo===hi){lo=lo-1;hi=hi+1;}var pad=(hi-lo)*0.05;return [lo<0?lo-pad:lo,hi+pad];}
function drawChart(c,box){
 var W=560,H=320,L=64,R=16,T=12,B=44,n=0;var svg=sv('svg',{width:W,height:H+22*Math.ceil(c.series.length/3),viewBox:'0 0 '+W+' '+(H+22*Math.ceil(c.series.length/3))});
 var xs=[],ys=[];c.series.forEach(function(s){s.points.forEach(function(p){xs.push(p[0]);ys.push(p[1]);});});
 var xr=range(xs,c.xlog),yr=range(ys,c.ylog);var X=scale(xr[0],xr[1],L,W-R,c.xlog),Y=scale(yr[0],yr[1],H-B,T,c.ylog);
 svg.appendChild(sv('rect',{x:L,y:T,width:W-L-R,height:H-T-B,fill:'none',stroke:'#999'}));
 ticks(yr[0],yr[1],c.ylog).forEach(function(v){var y=Y(v);svg.appendChild(sv('line',{x1:L,x2:W-R,y1:y,y2:y,stroke:'#eee'}));svg.appendChild(sv('text',{x:L-4,y:y+4,'text-anchor':'end','font-size':11},fmt(v)));});
 ticks(xr[0],xr[1],c.xlog).forEach(function(v){var x=X(v);svg.appendChild(sv('line',{x1:x,x2:x,y1:T,y2:H-B,stroke:'#eee'}));svg.appendChild(sv('text',{x:x,y:H-B+14,'text-anchor':'middle','font-size':11},c.xkind==='percentile'?pctLabel(v):fmt(v)));});
 svg.appendChild(sv('text',{x:(L+W-R)/2,y:H-8,'text-anchor':'middle','font-size':12},c.xlabel));
 svg.appendChild(sv('text',{x:14,y:(T+H-B)/2,'text-anchor':'middle','font-size':12,transform:'rotate(-90 14 '+((T+H-B)/2)+')'},c.ylabel));
 c.series.forEach(function(s,i){var col=COLORS[i%COLORS.length];
  if(!s.only_markers){var d=s.points.map(function(p,j){return (j?'L':'M')+X(p[0]).toFixed(1)+' '+Y(p[1]).toFixed(1);}).join(' ');
   var path=sv('path',{d:d,fill:'none',stroke:col,'stroke-width':1.8});if(s.dash)path.setAttribute('stroke-dasharray','6 4');path.setAttribute('class','series');svg.appendChild(path);}
  if(c.markers||s.only_markers||s.points.length===1){s.points.forEach(function(p){svg.appendChild(sv('circle',{cx:X(p[0]),cy:Y(p[1]),r:3.5,fill:col,'class':'marker'}));});}
  n+=s.points.length;
  var lx=L+(i%3)*165,ly=H+6+22*Math.floor(i/3);svg.appendChild(sv('rect',{x:lx,y:ly,width:14,height:4,fill:col}));
  svg.appendChild(sv('text',{x:lx+18,y:ly+6,'font-size':11},s.name.length>26?s.name.slice(0,25)+'…':s.name));});
 box.appendChild(svg);return n;}
function drawTimeline(c,box){
 var W=1100,rowH=4,L=60,R=16,T=10,B=36,bars=c.bars,H=T+B+bars.length*rowH;var svg=sv('svg',{width:W,height:H,viewBox:'0 0 '+W+' '+H,'class':'timeline'});
 var lo=Infinity,hi=-Infinity;bars.forEach(function(b){for(var k=1;k<=5;k++){if(b[k]!==null){lo=Math.min(lo,b[k]);hi=Math.max(hi,b[k]);}}});
 var X=scale(lo,hi,L,W-R,false),n=0;
 ticks(lo,hi,false).forEach(function(v){var x=X(v);svg.appendChild(sv('line',{x1:x,x2:x,y1:T,y2:H-B,stroke:'#eee'}));svg.appendChild(sv('text',{x:x,y:H-B+14,'text-anchor':'middle','font-size':11},fmt(v)));});
 svg.appendChild(sv('text',{x:(L+W-R)/2,y:H-6,'text-anchor':'middle','font-size':12},'time since run start (s)'));
 bars.forEach(function(b,i){var y=T+i*rowH;
  function seg(a,z,col){if(a===null||z===null)return;var w=Math.max(X(z)-X(a),0.8);svg.appendChild(sv('rect',{x:X(a),y:y,width:w,height:rowH-1,fill:col,'class':'bar'}));n++;}
  if(!b[6]){seg(b[1],b[5],'#d62728');return;}
  seg(b[1],b[2],'#bbb');seg(b[2],b[3],'#ff7f0e');seg(b[3],b[4],'#1f77b4');});
 box.appendChild(svg);return n;}
function drawChanges(c,box){
 var W=620,rowH=22,L=210,R=20,T=10,B=30,H=T+B+c.rows.length*rowH;var svg=sv('svg',{width:W,height:H,viewBox:'0 0 '+W+' '+H});
 var vals=[0];c.rows.forEach(function(r){[r[1],r[2],r[3]].forEach(function(v){if(v!==null)vals.push(v*100);});});
 var xr=range(vals,false),X=scale(xr[0],xr[1],L,W-R,false),n=0;
 svg.appendChild(sv('line',{x1:X(0),x2:X(0),y1:T,y2:H-B,stroke:'#999'}));
 ticks(xr[0],xr[1],false).forEach(function(v){svg.appendChild(sv('text',{x:X(v),y:H-B+14,'text-anchor':'middle','font-size':11},fmt(v)+'%'));});
 c.rows.forEach(function(r,i){var y=T+i*rowH+rowH/2;var col=r[5]==='REGRESSION'?'#d62728':(r[5]==='better'?'#2ca02c':'#555');
  svg.appendChild(sv('text',{x:L-8,y:y+4,'text-anchor':'end','font-size':11},r[0]));
  if(r[2]!==null&&r[3]!==null)svg.appendChild(sv('line',{x1:X(r[2]*100),x2:X(r[3]*100),y1:y,y2:y,stroke:col,'stroke-width':2}));
  svg.appendChild(sv('circle',{cx:X(r[1]*100),cy:y,r:4,fill:col,'class':'marker'}));n++;});
 box.appendChild(svg);return n;}
var data=JSON.parse(document.getElementById('page-data').textContent);
var app=document.getElementById('app');
app.appendChild(el('h1',{},data.title));
data.subtitle.forEach(function(s){app.appendChild(el('p',{'class':'sub'},s));});
var drawn=0,charts=0;
data.sections.forEach(function(s){
 if(s.type==='table'){app.appendChild(el('h2',{},s.title));var t=el('table');var hr=el('tr');s.head.forEach(function(h){hr.appendChild(el('th',{},h));});t.appendChild(hr);
  s.rows.forEach(function(r,i){var tr=el('tr',s.classes[i]?{'class':s.classes[i]}:{});r.forEach(function(c){tr.appendChild(el('td',{},c));});t.appendChild(tr);});app.appendChild(t);}
 else if(s.type==='note'){app.appendChild(el('p',{'class':'note'},s.text));}
 else{var box=el('div',{'class':'chart'+(s.type==='timeline'?' wide':'')});box.appendChild(el('h2',{},s.title));
  var n=s.type==='chart'?drawChart(s,box):s.type==='timeline'?drawTimeline(s,box):drawChanges(s,box);
  box.dataset.points=String(n);charts++;if(n>0)drawn++;if(s.note)box.appendChild(el('p',{'class':'note'},s.note));app.appendChild(box);}
});
document.body.dataset.charts=String(charts);document.body.dataset.chartsDrawn=String(drawn);document.body.dataset.rendered='ok';
})();
"""
